"""Determined experiment configs (0.38 and older field names) accepted as they are.

Fields Epochal keeps but does not act on are named in warnings, stay in the normalized config,
and survive a round trip through it; real mistakes still get today's errors.
"""

from __future__ import annotations

from typing import Any

import pytest

from common.expconf import (
    PLACEHOLDER_STORAGE,
    ConfigError,
    ExperimentConfig,
    config_warnings,
    parse_experiment_config,
)
from wire.run_spec import RunSpec

DETERMINED_CONFIG = """
name: mnist_pytorch_const
workspace: Uncategorized
project: Uncategorized
description: as written for Determined 0.38
labels: [vision]
data:
  url: https://example.com/mnist.tar.gz
hyperparameters:
  learning_rate: {type: log, base: 10, minval: -4, maxval: -1}
  n_filters1: {type: int, minval: 8, maxval: 64}
  dropout1: {type: double, minval: 0.2, maxval: 0.8}
  activation: {type: categorical, vals: [relu, tanh]}
  global_batch_size: 64
  optimizer: {momentum: {type: const, val: 0.9}}
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 937
records_per_epoch: 60000
scheduling_unit: 100
min_validation_period:
  batches: 300
min_checkpoint_period:
  epochs: 1
perform_initial_validation: true
checkpoint_policy: best
max_restarts: 3
profiling:
  enabled: true
  begin_on_batch: 0
optimizations:
  aggregation_frequency: 1
  mixed_precision: O0
debug: false
bind_mounts:
  - host_path: /tmp
    container_path: /data
    read_only: true
    propagation: rprivate
environment:
  image:
    cpu: determinedai/pytorch-ngc-dev:0736b6d
    cuda: determinedai/pytorch-ngc-dev:0736b6d-gpu
  environment_variables:
    - NCCL_DEBUG=INFO
  add_capabilities: [SYS_ADMIN]
resources:
  slots_per_trial: 1
  agent_label: fast
checkpoint_storage:
  type: shared_fs
  host_path: /mnt/checkpoints
  storage_path: determined-checkpoint
  save_experiment_best: 0
  save_trial_best: 1
  save_trial_latest: 1
entrypoint: >-
  python3 -m determined.launch.torch_distributed
  python3 train.py
"""


def test_a_determined_config_is_accepted_and_each_unused_field_named() -> None:
    config = parse_experiment_config(DETERMINED_CONFIG)
    warned = {line.split(":")[0] for line in config_warnings(config)}
    assert warned == {
        "records_per_epoch", "scheduling_unit",
        "perform_initial_validation", "checkpoint_policy", "optimizations",
        "bind_mounts[0].propagation", "environment.add_capabilities", "resources.agent_label",
    }  # `debug: false` switches nothing on, so it earns no warning; workspace/project file it;
    # `profiling` is acted on (the agent's system metrics)
    assert all("does not act on it" in line for line in config_warnings(config))
    # ... saying which of them Determined's own training loops in the trial still read.
    by_field = {line.split(":")[0]: line for line in config_warnings(config)}
    assert "Determined's training loops" in by_field["records_per_epoch"]
    assert "Determined's training loops" not in by_field["resources.agent_label"]
    assert (config.workspace, config.project) == ("Uncategorized", "Uncategorized")


def test_unused_fields_stay_in_the_normalized_config() -> None:
    dumped = parse_experiment_config(DETERMINED_CONFIG).model_dump(mode="json")
    assert dumped["profiling"] == {"enabled": True, "begin_on_batch": 0}
    assert dumped["optimizations"]["mixed_precision"] == "O0"
    assert dumped["debug"] is False
    assert dumped["environment"]["image"] == {
        "cpu": "determinedai/pytorch-ngc-dev:0736b6d",
        "cuda": "determinedai/pytorch-ngc-dev:0736b6d-gpu",
    }
    assert dumped["checkpoint_storage"]["storage_path"] == "determined-checkpoint"
    assert ExperimentConfig.model_validate(dumped).model_dump(mode="json") == dumped


def test_configs_without_determined_fields_dump_as_before() -> None:
    plain = parse_experiment_config(
        "entrypoint: python3 train.py\n"
        "searcher: {name: single, metric: loss, max_length: {batches: 5}}\n"
    )
    dumped = plain.model_dump(mode="json")
    assert "profiling" not in dumped and "weight" not in dumped["resources"]
    assert "workspace" not in dumped and "project" not in dumped
    assert "pod_spec" not in dumped["environment"]
    assert config_warnings(plain) == []


def test_s3_storage_is_accepted_as_is() -> None:
    config = parse_experiment_config(
        "entrypoint: python3 train.py\n"
        "searcher: {name: single, metric: loss, max_length: {batches: 5}}\n"
        "checkpoint_storage: {type: s3, bucket: ckpts, prefix: team/a,"
        " endpoint_url: 'http://127.0.0.1:8333', access_key: k, secret_key: s}\n"
    )
    assert config.model_dump(mode="json")["checkpoint_storage"]["bucket"] == "ckpts"
    assert config_warnings(config) == []


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("profilng: {enabled: true}\n", 'profilng: unknown field; did you mean "profiling"?'),
        ("resources: {wieght: 2}\n", 'resources.wieght: unknown field; did you mean "weight"?'),
        ("profiling: {enabled: !!binary aGk=}\n", "profiling: must be plain data"),
        ("checkpoint_storage: {type: s3}\n", "checkpoint_storage.bucket: field required"),
    ],
)
def test_mistakes_still_get_clear_errors(extra: str, expected: str) -> None:
    text = ("entrypoint: python3 train.py\n"
            "searcher: {name: single, metric: loss, max_length: {batches: 5}}\n") + extra
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(text)
    assert any(e.startswith(expected) for e in info.value.errors), info.value.errors


# Determined 0.38's Core API tutorial (examples/tutorials/core_api/0_start.yaml) as written.
CORE_API_0_START = """
name: core-api-stage-0
entrypoint: python3 0_start.py
searcher:
   name: single
   metric: x
max_restarts: 0
"""

# Its DeepSpeed DCGAN example: Determined's own default period, written out.
DEEPSPEED_DCGAN = """
name: dcgan_deepspeed_mnist
hyperparameters: {deepspeed_config: ds_config.json, noise_length: 100}
bind_mounts: [{host_path: /tmp, container_path: /data}]
resources: {slots_per_trial: 2}
searcher: {name: single, metric: no_validation_metric}
min_validation_period: {batches: 0}
entrypoint: [python3, -m, determined.launch.deepspeed, --trial, model_def:DCGANTrial]
"""


@pytest.mark.parametrize(
    "searcher",
    [
        "{name: single, metric: x}",
        "{name: grid, metric: x, max_concurrent_trials: 2}",
        "{name: random, metric: x, max_trials: 3}",
    ],
)
def test_searchers_without_max_length_are_accepted(searcher: str) -> None:
    config = parse_experiment_config(f"entrypoint: python3 train.py\nsearcher: {searcher}\n")
    assert config.searcher.max_length is None
    assert config_warnings(config) == []


def test_determined_tutorials_without_max_length_are_accepted() -> None:
    assert parse_experiment_config(CORE_API_0_START).searcher.max_length is None
    dcgan = parse_experiment_config(DEEPSPEED_DCGAN).model_dump(mode="json")
    assert dcgan["min_validation_period"] == {"batches": 0}


@pytest.mark.parametrize("name", ["async_halving", "adaptive_asha"])
def test_asha_without_a_length_is_refused_as_determined_does(name: str) -> None:
    rungs = "num_rungs: 3, " if name == "async_halving" else ""
    text = f"entrypoint: x\nsearcher: {{name: {name}, metric: x, {rungs}max_trials: 4}}\n"
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(text)
    assert info.value.errors == [
        'searcher.max_length: field required (or "time_metric" and "max_time")'
    ]


def _determined_config(config: ExperimentConfig, max_length: dict[str, int] | None = None
                       ) -> dict[str, Any]:
    """What Determined's code in a run of `config` training to `max_length` is given."""
    return RunSpec.of(config).determined_config(max_length)


def test_determined_code_sees_no_max_length_when_the_config_has_none() -> None:
    """Determined's Core API then gives no `core.searcher` (its 0.38 behaviour)."""
    seen = _determined_config(parse_experiment_config(CORE_API_0_START))
    assert "max_length" not in seen["searcher"]
    # ... and the defaults Determined's master fills in, which its PyTorchTrial harness reads.
    assert seen["min_validation_period"] == {"batches": 0}
    assert seen["min_checkpoint_period"] == {"batches": 0}
    assert seen["scheduling_unit"] == 100 and seen["checkpoint_policy"] == "best"
    assert seen["optimizations"]["aggregation_frequency"] == 1


def test_determined_code_sees_no_time_metric_target_as_max_length() -> None:
    config = parse_experiment_config(
        "entrypoint: x\nsearcher: {name: adaptive_asha, metric: loss, max_trials: 4,"
        " time_metric: epoch, max_time: 8}\n"
    )
    seen = _determined_config(config, {"epoch": 2})
    assert "max_length" not in seen["searcher"]
    assert seen["searcher"]["time_metric"] == "epoch" and seen["searcher"]["max_time"] == 8


# Its textual-inversion example: a storage naming only what to keep, no `type`.
PARTIAL_STORAGE = """
entrypoint: python3 -m determined.launch.torch_distributed python3 main.py
searcher: {name: single, metric: loss, max_length: 100}
checkpoint_storage: {save_trial_best: 1, save_experiment_best: 0, save_trial_latest: 0}
"""


def test_a_storage_without_type_refines_the_masters_default() -> None:
    """The CLI's check and the master agree: such a storage is merged into the master's."""
    master = {"type": "shared_fs", "host_path": "/srv/checkpoints"}
    merged = parse_experiment_config(PARTIAL_STORAGE, default_storage=master)
    storage = merged.model_dump(mode="json")["checkpoint_storage"]
    assert storage["host_path"] == "/srv/checkpoints" and storage["save_trial_best"] == 1
    assert storage["save_trial_latest"] == 0
    offline = parse_experiment_config(PARTIAL_STORAGE, default_storage=PLACEHOLDER_STORAGE)
    assert offline.model_dump(mode="json")["checkpoint_storage"]["save_trial_best"] == 1
    with pytest.raises(ConfigError) as info:  # with no default to refine, `type` is needed
        parse_experiment_config(PARTIAL_STORAGE)
    assert info.value.errors == ["checkpoint_storage.type: field required"]
