"""The experiment-config model: what it accepts, how it normalizes, and how it reports mistakes."""

import copy
import datetime
import pathlib
import textwrap
from typing import Any

import pytest
from pydantic import ValidationError

from common.expconf import (
    MAX_GRID_SIZE,
    ConfigError,
    ExperimentConfig,
    GridConfig,
    IntHyperparameter,
    Length,
    SingleConfig,
    config_warnings,
    parse_experiment_config,
    planned_trials,
    validate_experiment_config,
    with_determined_defaults,
)

EXAMPLES = sorted((pathlib.Path(__file__).parents[2] / "examples").glob("*/*.yaml"))

MINIMAL: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
}


def errors_of(data: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_experiment_config(data, source="exp.yaml")
    return info.value.errors


def errors_of_yaml(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(textwrap.dedent(text), source="exp.yaml")
    return info.value.errors


def with_(**changes: object) -> dict[str, object]:
    data: dict[str, object] = copy.deepcopy(MINIMAL)
    data.update(changes)
    return data


# --- good configs -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_examples_are_valid_and_round_trip(path: pathlib.Path) -> None:
    config = parse_experiment_config(path.read_text(), source=str(path))
    dumped = config.model_dump(mode="json")
    assert ExperimentConfig.model_validate(dumped).model_dump(mode="json") == dumped


def test_minimal_config_gets_determined_defaults() -> None:
    assert validate_experiment_config(MINIMAL).model_dump(mode="json") == {
        "name": "Experiment",
        "description": None,
        "labels": [],
        "data": {},
        "entrypoint": "python3 train.py",
        "hyperparameters": {},
        "searcher": {
            "name": "single",
            "metric": "loss",
            "smaller_is_better": True,
            "max_length": {"batches": 10},
        },
        "resources": {
            "slots_per_trial": 1,
            "resource_pool": "default",
            "priority": None,
            "max_slots": None,
            "shm_size": None,
        },
        "max_restarts": 5,
        "min_validation_period": None,
        "min_checkpoint_period": None,
        "checkpoint_storage": None,
        "environment": {"image": None, "environment_variables": {}, "force_pull_image": False},
        "bind_mounts": [],
        "reproducibility": {"experiment_seed": None},
    }


FULL = """
name: mnist
description: a test
labels: [a, b]
data: {url: "http://x", sizes: [1, 2]}
entrypoint: [python3, train.py, --name, "two words"]
hyperparameters:
  lr: {type: log, minval: -4, maxval: -1, count: 4}
  wd: {type: double, minval: 0, maxval: 0.1}
  units: {type: int, minval: 8, maxval: 64, count: 4}
  act: {type: categorical, vals: [relu, [1, 2], {name: sgd, momentum: 0.9}]}
  batch: 32
  layers: [64, 32]
  explicit: {type: const, val: {a: 1}}
  optimizer:
    momentum: 0.9
    inner: {beta: {type: double, minval: 0.5, maxval: 0.99}}
searcher:
  name: random
  metric: val_loss
  smaller_is_better: false
  max_trials: 8
  max_length: {epochs: 3}
  max_concurrent_trials: 0
  source_trial_id: 4
resources: {slots_per_trial: 2, resource_pool: gpus, priority: 10, max_slots: 8}
max_restarts: 0
min_validation_period: {batches: 50}
min_checkpoint_period: {records: 1000}
checkpoint_storage:
  type: shared_fs
  host_path: /mnt/ckpt
  storage_path: exp
  save_experiment_best: 2
  save_trial_best: 0
  save_trial_latest: 3
environment:
  image: python:3.11
  environment_variables: ["A=1", "B=x=y", "EMPTY="]
bind_mounts:
  - {host_path: /data, container_path: /data, read_only: true}
  - {host_path: /scratch, container_path: /scratch}
reproducibility: {experiment_seed: 99}
"""


def test_full_config_normalizes() -> None:
    config = parse_experiment_config(FULL, source="full.yaml")
    dumped = config.model_dump(mode="json")
    assert dumped["entrypoint"] == "python3 train.py --name 'two words'"
    assert dumped["hyperparameters"] == {
        "lr": {"type": "log", "base": 10.0, "minval": -4.0, "maxval": -1.0, "count": 4},
        "wd": {"type": "double", "minval": 0.0, "maxval": 0.1, "count": None},
        "units": {"type": "int", "minval": 8, "maxval": 64, "count": 4},
        "act": {"type": "categorical", "vals": ["relu", [1, 2], {"name": "sgd", "momentum": 0.9}]},
        "batch": {"type": "const", "val": 32},
        "layers": {"type": "const", "val": [64, 32]},
        "explicit": {"type": "const", "val": {"a": 1}},
        "optimizer": {
            "momentum": {"type": "const", "val": 0.9},
            "inner": {"beta": {"type": "double", "minval": 0.5, "maxval": 0.99, "count": None}},
        },
    }
    assert dumped["searcher"] == {
        "name": "random",
        "metric": "val_loss",
        "smaller_is_better": False,
        "max_length": {"epochs": 3},
        "source_trial_id": 4,  # kept, with a warning (Epochal does not act on it)
        "max_trials": 8,
        "max_concurrent_trials": 0,
    }
    assert dumped["min_validation_period"] == {"batches": 50}
    assert dumped["min_checkpoint_period"] == {"records": 1000}
    assert dumped["checkpoint_storage"] == {
        "type": "shared_fs",
        "host_path": "/mnt/ckpt",
        "storage_path": "exp",
        "save_experiment_best": 2,
        "save_trial_best": 0,
        "save_trial_latest": 3,
    }
    assert dumped["environment"] == {
        "image": "python:3.11",
        "environment_variables": {"A": "1", "B": "x=y", "EMPTY": ""},
        "force_pull_image": False,
    }
    assert dumped["bind_mounts"][1] == {
        "host_path": "/scratch",
        "container_path": "/scratch",
        "read_only": False,
    }
    assert dumped["data"] == {"url": "http://x", "sizes": [1, 2]}
    assert dumped["reproducibility"] == {"experiment_seed": 99}
    assert dumped["resources"]["priority"] == 10
    assert config.searcher.max_length.unit == "epochs"
    assert config.searcher.max_length.value == 3
    assert config_warnings(config) == [
        "searcher.source_trial_id: accepted and kept, but Epochal does not act on it"
    ]


def test_dump_round_trips_through_model_validate() -> None:
    dumped = parse_experiment_config(FULL).model_dump(mode="json")
    again = ExperimentConfig.model_validate(dumped)
    assert again.model_dump(mode="json") == dumped
    # and through the friendly entry point too
    assert validate_experiment_config(dumped).model_dump(mode="json") == dumped


def test_bare_int_max_length_means_batches() -> None:
    config = validate_experiment_config(
        with_(searcher={"name": "single", "metric": "m", "max_length": 300})
    )
    assert config.model_dump(mode="json")["searcher"]["max_length"] == {"batches": 300}
    assert Length.model_validate(7).model_dump() == {"batches": 7}


def test_null_means_default() -> None:
    config = parse_experiment_config(
        """
        entrypoint: python3 train.py
        labels:
        resources:
        environment:
        description:
        searcher: {name: grid, metric: m, max_length: 5, max_concurrent_trials: null}
        """
    )
    assert config.labels == []
    assert config.resources.slots_per_trial == 1
    assert config.description is None
    assert isinstance(config.searcher, GridConfig)
    assert config.searcher.max_concurrent_trials == 16


@pytest.mark.parametrize(
    "variables",
    [
        {"A": "1", "B": 2, "C": True},
        ["A=1", "B=2", "C=true"],
        {"cpu": ["A=1", "B=2"], "cuda": ["A=1", "C=true"]},
    ],
)
def test_environment_variable_forms(variables: object) -> None:
    config = validate_experiment_config(with_(environment={"environment_variables": variables}))
    assert config.environment.environment_variables == {"A": "1", "B": "2", "C": "true"}


def test_per_device_image_with_one_value() -> None:
    config = validate_experiment_config(with_(environment={"image": {"cpu": "img", "cuda": "img"}}))
    assert config.environment.image == "img"


def test_models_can_be_built_in_python() -> None:
    config = ExperimentConfig(
        entrypoint="python3 train.py",
        searcher=SingleConfig(metric="loss", max_length=Length(batches=5)),
        hyperparameters={"n": IntHyperparameter(minval=1, maxval=3)},
    )
    assert config.model_dump(mode="json")["hyperparameters"]["n"]["type"] == "int"
    assert ExperimentConfig.model_validate(config.model_dump(mode="json")) == config


# --- bad configs --------------------------------------------------------------------------------


def test_malformed_yaml_names_file_line_and_column() -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config("entrypoint: x\nsearcher: {name: [single\n", source="exp.yaml")
    assert len(info.value.errors) == 1
    assert info.value.errors[0].startswith("exp.yaml, line 3, column 1: ")
    assert str(info.value).startswith("exp.yaml: ")


def test_duplicate_yaml_key_is_an_error() -> None:
    errors = errors_of_yaml(
        """
        entrypoint: a
        entrypoint: b
        """
    )
    assert errors == ["exp.yaml, line 3, column 1: found duplicate key 'entrypoint'"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "config: is empty"),
        ("- 1\n- 2\n", "config: must be a mapping of fields (got a list)"),
        ("just text", 'config: must be a mapping of fields (got "just text")'),
    ],
)
def test_config_must_be_a_mapping(text: str, expected: str) -> None:
    assert errors_of_yaml(text) == [expected]


def test_unknown_top_level_key_suggests() -> None:
    assert errors_of(with_(entrypont="x")) == [
        'entrypont: unknown field; did you mean "entrypoint"?'
    ]


def test_unknown_nested_keys_suggest() -> None:
    data = with_(
        searcher={"name": "single", "metirc": "m", "metric": "m", "max_length": {"batchs": 2}},
        resources={"slots_per_trail": 2},
        hyperparameters={"g": {"lr": {"type": "log", "minval": 1, "maxval": 2, "bse": 2}}},
        checkpoint_storage={"type": "shared_fs", "host_path": "/x", "save_trial_bst": 1},
        bind_mounts=[{"host_path": "/a", "container_path": "/a", "readonly": True}],
        wibble=1,
    )
    assert sorted(errors_of(data)) == sorted(
        [
            'searcher.metirc: unknown field; did you mean "metric"?',
            'searcher.max_length.batchs: unknown field; did you mean "batches"?',
            'resources.slots_per_trail: unknown field; did you mean "slots_per_trial"?',
            'hyperparameters.g.lr.bse: unknown field; did you mean "base"?',
            'checkpoint_storage.save_trial_bst: unknown field; did you mean "save_trial_best"?',
            'bind_mounts[0].readonly: unknown field; did you mean "read_only"?',
            "wibble: unknown field",
        ]
    )


def test_field_of_another_searcher_says_so() -> None:
    data = with_(searcher={**MINIMAL["searcher"], "max_trials": 3})
    assert errors_of(data) == ['searcher.max_trials: not a field of the "single" searcher']


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"searcher": MINIMAL["searcher"]}, ["entrypoint: field required"]),
        ({"entrypoint": "x"}, ["searcher: field required"]),
        (
            {"entrypoint": "x", "searcher": {"name": "random", "max_length": 1}},
            ["searcher.metric: field required", "searcher.max_trials: field required"],
        ),
        (
            {"entrypoint": "x", "searcher": {"name": "async_halving", "metric": "m",
                                             "num_rungs": 2, "max_trials": 4}},
            ['searcher.max_length: field required (or "time_metric" and "max_time")'],
        ),
        (
            {"entrypoint": "x", "searcher": {"metric": "m", "max_length": 1}},
            ["searcher.name: field required"],
        ),
    ],
)
def test_missing_fields(data: dict[str, object], expected: list[str]) -> None:
    assert errors_of(data) == expected


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"max_restarts": "5"}, 'max_restarts: must be an integer (got "5")'),
        ({"max_restarts": True}, "max_restarts: must be an integer (got true)"),
        ({"max_restarts": -1}, "max_restarts: must be >= 0 (got -1)"),
        ({"labels": "a"}, 'labels: must be a list (got "a")'),
        ({"labels": ["a", 3]}, "labels[1]: must be a string (got 3)"),
        ({"name": 5}, "name: must be a string (got 5)"),
        ({"entrypoint": ""}, "entrypoint: must not be empty"),
        ({"entrypoint": []}, "entrypoint: must not be empty"),
        ({"entrypoint": ["python3", 3]}, "entrypoint[1]: must be a string (got 3)"),
        ({"resources": {"priority": 0}}, "resources.priority: must be >= 1 (got 0)"),
        ({"resources": {"priority": 100}}, "resources.priority: must be <= 99 (got 100)"),
        ({"resources": []}, "resources: must be a mapping (got a list)"),
        (
            {"resources": {"slots_per_trial": 1.5}},
            "resources.slots_per_trial: must be an integer (got 1.5)",
        ),
        (
            {"checkpoint_storage": {"type": "shared_fs"}},
            "checkpoint_storage.host_path: field required",
        ),
        (
            {"checkpoint_storage": {"type": "shared_fs", "host_path": "/x", "save_trial_best": -1}},
            "checkpoint_storage.save_trial_best: must be >= 0 (got -1)",
        ),
        (
            {"checkpoint_storage": {"type": "gcs", "bucket": "b"}},
            'checkpoint_storage.type: checkpoint storage type "gcs": Epochal keeps checkpoints '
            "on a shared filesystem or S3 only",
        ),
        (
            {"checkpoint_storage": {"type": "directory", "container_path": "/c"}},
            'checkpoint_storage.type: checkpoint storage type "directory": Epochal\'s master and '
            "agents cannot know which host directory",
        ),
        (
            {"checkpoint_storage": {"type": "s3", "bucket": "b", "prefix": "a/../b"}},
            'checkpoint_storage.prefix: must not contain ".." as a path part',
        ),
        (
            {"checkpoint_storage": {"type": "shared-fs"}},
            'checkpoint_storage.type: unknown checkpoint storage type "shared-fs"; must be one of '
            '"shared_fs", "s3"; did you mean "shared_fs"?',
        ),
        (
            {"searcher": {"name": "custom", "metric": "m"}},
            'searcher.name: searcher "custom": Determined 0.38 removed custom searchers',
        ),
        (
            {"searcher": {"name": "sync_halving", "metric": "m"}},
            'searcher.name: searcher "sync_halving": is an end-of-life Determined searcher',
        ),
        (
            {"searcher": {"name": "pbt", "metric": "m"}},
            'searcher.name: unknown searcher "pbt"; '
            'must be one of "single", "grid", "random", "async_halving", "adaptive_asha"',
        ),
        (
            {"resources": {"shm_size": "4 cups"}},
            'resources.shm_size: must be a number of bytes or a size such as "4G" (got "4 cups")',
        ),
        ({"resources": {"shm_size": 0}}, "resources.shm_size: must be >= 1 (got 0)"),
        (
            {"bind_mounts": [{"host_path": "data", "container_path": "/d"}]},
            'bind_mounts[0].host_path: must be an absolute path (got "data")',
        ),
        (
            {"bind_mounts": [{"host_path": "/data", "container_path": "."}]},
            'bind_mounts[0].container_path: must not be "."',
        ),
        (
            {"checkpoint_policy": "some"},
            "checkpoint_policy: must be 'best', 'all' or 'none' (got \"some\")",
        ),
        (
            {"min_validation_period": {"batches": -1}},
            "min_validation_period.batches: must be >= 0 (got -1)",
        ),
        (
            {"searcher": {"name": "randm", "metric": "m"}},
            'searcher.name: unknown searcher "randm"; must be one of "single", "grid", "random", '
            '"async_halving", "adaptive_asha", "optuna"; did you mean "random"?',
        ),
        ({"searcher": "single"}, 'searcher: must be a mapping (got "single")'),
        (
            {"searcher": {"name": "single", "metric": "m", "max_length": {"batches": 0}}},
            "searcher.max_length.batches: must be >= 1 (got 0)",
        ),
        (
            {
                "searcher": {
                    "name": "single",
                    "metric": "m",
                    "max_length": {"batches": 1, "epochs": 1},
                }
            },
            'searcher.max_length: must have exactly one of "batches", "records" or "epochs"',
        ),
        (
            {"searcher": {"name": "single", "metric": "m", "max_length": {}}},
            'searcher.max_length: must have exactly one of "batches", "records" or "epochs"',
        ),
        (
            {"searcher": {"name": "random", "metric": "m", "max_length": 1, "max_trials": 0}},
            "searcher.max_trials: must be >= 1 (got 0)",
        ),
        (
            {"searcher": {"name": "single", "metric": "", "max_length": 1}},
            "searcher.metric: must not be empty",
        ),
        (
            {
                "searcher": {
                    "name": "single",
                    "metric": "m",
                    "max_length": 1,
                    "smaller_is_better": "no",
                }
            },
            'searcher.smaller_is_better: must be true or false (got "no")',
        ),
        (
            {"environment": {"environment_variables": ["A=1", "NOEQUALS"]}},
            'environment.environment_variables[1]: must be "KEY=VALUE" (got "NOEQUALS")',
        ),
        (
            {"environment": {"environment_variables": {"A": [1]}}},
            "environment.environment_variables.A: must be a string or a number (got a list)",
        ),
        (
            {"environment": {"environment_variables": {"cpu": ["A=1"], "cuda": ["A=2"]}}},
            'environment.environment_variables.cuda[0]: "A" differs from its value for cpu; '
            "Epochal sets the same variables on every device",
        ),
        (
            {"environment": {"image": {"cpu": "a", "tpu": "b"}}},
            'environment.image: must be an image name or a mapping of "cpu", "cuda", "gpu", '
            '"rocm" to image names (got a mapping)',
        ),
        ({"bind_mounts": [{"host_path": "/a"}]}, "bind_mounts[0].container_path: field required"),
        (
            {"reproducibility": {"experiment_seed": -1}},
            "reproducibility.experiment_seed: must be >= 0 (got -1)",
        ),
        ({"data": {"when": datetime.date(2020, 1, 1)}}, "data.when: must be plain data"),
    ],
)
def test_wrong_values(changes: dict[str, object], expected: str) -> None:
    errors = errors_of(with_(**changes))
    assert len(errors) == 1, errors
    assert errors[0].startswith(expected), errors


@pytest.mark.parametrize(
    ("hparam", "expected"),
    [
        (
            {"type": "int", "minval": 1.5, "maxval": 3},
            "hyperparameters.h.minval: must be an integer (got 1.5)",
        ),
        (
            {"type": "int", "minval": 5, "maxval": 3},
            "hyperparameters.h.maxval: must be >= minval (3 < 5)",
        ),
        (
            {"type": "double", "minval": 1, "maxval": 0.5},
            "hyperparameters.h.maxval: must be >= minval (0.5 < 1.0)",
        ),
        (
            {"type": "double", "minval": "a", "maxval": 1},
            'hyperparameters.h.minval: must be a number (got "a")',
        ),
        (
            {"type": "log", "minval": 1, "maxval": 2, "base": 0},
            "hyperparameters.h.base: must be > 0 (got 0)",
        ),
        (
            {"type": "int", "minval": 1, "maxval": 3, "count": 0},
            "hyperparameters.h.count: must be >= 1 (got 0)",
        ),
        ({"type": "int", "maxval": 3}, "hyperparameters.h.minval: field required"),
        ({"type": "categorical", "vals": []}, "hyperparameters.h.vals: must not be empty"),
        ({"type": "categorical"}, "hyperparameters.h.vals: field required"),
        ({"type": "const"}, "hyperparameters.h.val: field required"),
        (
            {"type": "float", "minval": 1, "maxval": 2},
            'hyperparameters.h.type: unknown hyperparameter type "float"; must be one of "const", '
            '"int", "double", "log", "categorical" (or no "type" for a group of hyperparameters)',
        ),
        (
            {"type": "doubel", "minval": 1, "maxval": 2},
            'hyperparameters.h.type: unknown hyperparameter type "doubel"',
        ),
        (
            {"inner": {"type": "int", "minval": 2, "maxval": 1}},
            "hyperparameters.h.inner.maxval: must be >= minval",
        ),
    ],
)
def test_bad_hyperparameters(hparam: dict[str, object], expected: str) -> None:
    errors = errors_of(with_(hyperparameters={"h": hparam}))
    assert len(errors) == 1, errors
    assert errors[0].startswith(expected), errors


GRID = {"name": "grid", "metric": "m", "max_length": {"batches": 1}}


def test_grid_needs_count_on_every_range() -> None:
    data = with_(
        searcher=GRID,
        hyperparameters={
            "learning_rate": {"type": "log", "minval": -3, "maxval": -1},
            "units": {"type": "int", "minval": 1, "maxval": 4, "count": 2},
            "opt": {"wd": {"type": "double", "minval": 0, "maxval": 1}},
            "act": {"type": "categorical", "vals": ["a", "b"]},
        },
    )
    assert errors_of(data) == [
        "hyperparameters.learning_rate.count: required for grid search",
        "hyperparameters.opt.wd.count: required for grid search",
    ]
    # the same ranges are fine for a random search
    data["searcher"] = {"name": "random", "metric": "m", "max_length": 1, "max_trials": 2}
    validate_experiment_config(data)


def test_billion_point_grid_is_rejected_with_its_size() -> None:
    axis = {"type": "double", "minval": 0, "maxval": 1, "count": 1000}
    data = with_(searcher=GRID, hyperparameters={"a": axis, "b": axis, "c": axis})
    assert errors_of(data) == [
        "hyperparameters: the grid has 1,000,000,000 points, more than the 100,000 allowed; "
        "lower some counts"
    ]


def test_grid_at_the_limit_is_accepted() -> None:
    assert MAX_GRID_SIZE == 100_000
    data = with_(
        searcher=GRID,
        hyperparameters={
            "a": {"type": "double", "minval": 0, "maxval": 1, "count": 1000},
            "b": {"type": "int", "minval": 1, "maxval": 100, "count": 500},  # 100 distinct ints
        },
    )
    validate_experiment_config(data)
    data["hyperparameters"]["b"]["maxval"] = 101  # type: ignore[index]
    assert "101,000 points" in errors_of(data)[0]


def test_model_validate_alone_enforces_grid_checks() -> None:
    data = with_(searcher=GRID, hyperparameters={"a": {"type": "int", "minval": 1, "maxval": 2}})
    with pytest.raises(ValidationError):
        ExperimentConfig.model_validate(data)


def test_all_errors_are_reported_at_once() -> None:
    errors = errors_of_yaml(
        """
        entrypont: python3 train.py
        hyperparameters:
          lr: {type: double, minval: 1, maxval: 0}
          units: {type: int, minval: 1, maxval: 8}
        searcher:
          name: grid
          max_length: {batches: 0}
        resources: {slots_per_trial: two}
        max_restarts: -3
        """
    )
    assert errors == [
        "entrypoint: field required",
        "hyperparameters.lr.maxval: must be >= minval (0.0 < 1.0)",
        "searcher.metric: field required",
        "searcher.max_length.batches: must be >= 1 (got 0)",
        'resources.slots_per_trial: must be an integer (got "two")',
        "max_restarts: must be >= 0 (got -3)",
        'entrypont: unknown field; did you mean "entrypoint"?',
    ]


def test_grid_errors_reported_alongside_other_errors() -> None:
    data = {"searcher": GRID, "hyperparameters": {"a": {"type": "int", "minval": 1, "maxval": 2}}}
    assert errors_of(data) == [
        "entrypoint: field required",
        "hyperparameters.a.count: required for grid search",
    ]


def test_error_text_is_readable_and_free_of_pydantic_internals() -> None:
    with pytest.raises(ConfigError) as info:
        validate_experiment_config(
            {"searcher": {"name": "single", "metric": 3, "max_length": "x"}, "labels": 1},
            source="my.yaml",
        )
    text = str(info.value)
    lines = text.splitlines()
    assert lines[0] == f"my.yaml: the experiment config has {len(info.value.errors)} errors:"
    assert lines[1:] == [f"  {e}" for e in info.value.errors]
    for needle in ("pydantic", "http", "Input should", "<single>", "function-", "[key]"):
        assert needle not in text
    assert info.value.source == "my.yaml"


def test_hyperparameter_names_must_be_strings() -> None:
    assert errors_of_yaml(
        """
        entrypoint: x
        searcher: {name: single, metric: m, max_length: 1}
        hyperparameters: {1: 2}
        """
    ) == ["hyperparameters.1: names must be strings"]


# --- Determined 0.38's optional lengths and defaults ---------------------------------------------


@pytest.mark.parametrize(
    "searcher",
    [
        {"name": "single"},
        {"name": "grid"},
        {"name": "random", "max_trials": 3},
    ],
)
def test_max_length_is_optional_for_searchers_that_decide_up_front(
    searcher: dict[str, Any],
) -> None:
    config = validate_experiment_config(with_(searcher={"metric": "m", **searcher}))
    assert config.searcher.max_length is None
    dumped = config.model_dump(mode="json")
    assert dumped["searcher"]["max_length"] is None
    assert ExperimentConfig.model_validate(dumped).model_dump(mode="json") == dumped


def test_asha_needs_max_length_or_a_time_metric() -> None:
    searcher = {"name": "adaptive_asha", "metric": "m", "max_trials": 4}
    assert errors_of(with_(searcher=searcher)) == [
        'searcher.max_length: field required (or "time_metric" and "max_time")'
    ]
    timed = validate_experiment_config(
        with_(searcher={**searcher, "time_metric": "epochs", "max_time": 8})
    )
    assert timed.searcher.max_length is None


@pytest.mark.parametrize("field", ["min_validation_period", "min_checkpoint_period"])
@pytest.mark.parametrize("length", [{"batches": 0}, {"epochs": 0}, {"records": 0}, 0])
def test_periods_of_zero_are_accepted_as_in_determined(field: str, length: object) -> None:
    config = validate_experiment_config(with_(**{field: length}))
    dumped = config.model_dump(mode="json")[field]
    assert list(dumped.values()) == [0]


def test_an_empty_resource_pool_means_the_default_pool() -> None:
    config = validate_experiment_config(with_(resources={"resource_pool": ""}))
    assert config.resources.resource_pool == "default"


@pytest.mark.parametrize(
    ("size", "bytes_"),
    [(1024, 1024), ("4G", 4 * 1024**3), ("512MiB", 512 * 1024**2), ("1.5 gb", 1536 * 1024**2),
     ("100", 100), ("64k", 64 * 1024)],
)
def test_shm_size_takes_determined_memory_sizes(size: object, bytes_: int) -> None:
    config = validate_experiment_config(with_(resources={"shm_size": size}))
    assert config.model_dump(mode="json")["resources"]["shm_size"] == bytes_


def test_divisor_takes_any_value_above_one_as_determined() -> None:
    searcher = {"name": "async_halving", "metric": "m", "max_length": 8, "num_rungs": 3,
                "max_trials": 4, "divisor": 1.5}
    assert validate_experiment_config(with_(searcher=searcher)).searcher.divisor == 1.5


def test_determined_fields_added_in_this_pass_are_kept_and_named() -> None:
    config = validate_experiment_config(
        with_(
            resources={"slots": 2},
            retention_policy={"log_retention_days": 90},
            checkpoint_storage={"type": "shared_fs", "host_path": "/x", "checkpoint_path": "/c"},
        )
    )
    dumped = config.model_dump(mode="json")
    assert dumped["resources"]["slots"] == 2
    assert dumped["retention_policy"] == {"log_retention_days": 90}
    assert {line.split(":")[0] for line in config_warnings(config)} == {
        "resources.slots", "retention_policy", "checkpoint_storage.checkpoint_path",
    }


def test_determined_defaults_fill_what_its_harness_reads() -> None:
    dumped = validate_experiment_config(
        with_(min_validation_period={"epochs": 1}, optimizations={"aggregation_frequency": 4})
    ).model_dump(mode="json")
    filled = with_determined_defaults(dumped)
    assert filled["min_validation_period"] == {"epochs": 1}  # the user's value stays
    assert filled["min_checkpoint_period"] == {"batches": 0}
    assert filled["scheduling_unit"] == 100
    assert filled["checkpoint_policy"] == "best"
    assert filled["perform_initial_validation"] is False
    assert filled["profiling"]["enabled"] is False
    assert filled["optimizations"]["aggregation_frequency"] == 4  # merged with the defaults
    assert filled["optimizations"]["average_training_metrics"] is True
    assert "scheduling_unit" not in dumped  # the normalized config itself is unchanged


@pytest.mark.parametrize(("searcher", "hyperparameters", "planned"), [
    ({"name": "single", "max_length": {"batches": 1}}, {}, 1),
    ({"name": "random", "max_trials": 7}, {}, 7),
    ({"name": "adaptive_asha", "max_trials": 16, "max_length": {"batches": 64}}, {}, 16),
    ({"name": "grid"}, {"lr": {"type": "categorical", "vals": [1, 2, 3]},
                        "opt": {"m": {"type": "int", "minval": 1, "maxval": 2, "count": 5}}}, 6),
])
def test_planned_trials(searcher: dict, hyperparameters: dict, planned: int) -> None:
    config = validate_experiment_config({
        "entrypoint": "python3 train.py", "searcher": {"metric": "loss", **searcher},
        "hyperparameters": hyperparameters})
    assert planned_trials(config) == planned
