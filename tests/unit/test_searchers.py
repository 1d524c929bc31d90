"""The single, grid and random searchers against hand-computed trial lists."""

import random
from typing import Any

import pytest

from common.expconf import (
    DoubleHyperparameter,
    ExperimentConfig,
    IntHyperparameter,
    LogHyperparameter,
    hyperparameters_grid_size,
    stored_config,
    validate_experiment_config,
)
from workflows.searchers import generate_trials, make_search, trial_seed
from workflows.searchers.base import Create
from workflows.searchers.hparams import grid_values


def raw_config(searcher: str, hparams: dict[str, Any], **searcher_fields: Any) -> dict[str, Any]:
    return {
        "entrypoint": "python3 train.py",
        "hyperparameters": hparams,
        "searcher": {"name": searcher, "metric": "loss", "max_length": 10, **searcher_fields},
    }


def config(searcher: str, hparams: dict[str, Any], **searcher_fields: Any) -> ExperimentConfig:
    return validate_experiment_config(raw_config(searcher, hparams, **searcher_fields))


HPARAMS = {
    "const": 3,
    "lst": [1, 2],
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -2, "count": 3},
    "units": {"type": "int", "minval": 8, "maxval": 64, "count": 2},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5, "count": 2},
    "act": {"type": "categorical", "vals": [{"name": "relu"}, ["tanh", 2]]},
    "opt": {
        "momentum": {"type": "double", "minval": 0.5, "maxval": 0.9, "count": 1},
        "nesterov": True,
    },
    "empty": {},
}


# --- single -------------------------------------------------------------------------------------


def test_single_takes_middle_values_and_first_category() -> None:
    assert generate_trials(config("single", HPARAMS), seed=1) == [
        {
            "act": {"name": "relu"},
            "const": 3,
            "dropout": 0.25,
            "empty": {},
            "lr": pytest.approx(1e-3),
            "lst": [1, 2],
            "opt": {"momentum": 0.7, "nesterov": True},
            "units": 36,
        }
    ]


@pytest.mark.parametrize(
    ("minval", "maxval", "middle"),
    [(8, 64, 36), (1, 2, 2), (-2, -1, -2), (-3, 0, -2), (0, 0, 0), (-1, 1, 0)],
)
def test_single_int_middle_rounds_halves_away_from_zero(
    minval: int, maxval: int, middle: int
) -> None:
    hparams = {"n": {"type": "int", "minval": minval, "maxval": maxval}}
    assert generate_trials(config("single", hparams), seed=0) == [{"n": middle}]


def test_single_without_hyperparameters() -> None:
    assert generate_trials(config("single", {}), seed=0) == [{}]


# --- grid ---------------------------------------------------------------------------------------


def test_grid_is_the_cartesian_product_in_sorted_name_order_first_slowest() -> None:
    hparams = {
        "b": {"type": "categorical", "vals": ["x", "y"]},
        "a": {"type": "int", "minval": 1, "maxval": 3, "count": 3},
        "c": 0.5,
    }
    assert generate_trials(config("grid", hparams), seed=0) == [
        {"a": 1, "b": "x", "c": 0.5},
        {"a": 1, "b": "y", "c": 0.5},
        {"a": 2, "b": "x", "c": 0.5},
        {"a": 2, "b": "y", "c": 0.5},
        {"a": 3, "b": "x", "c": 0.5},
        {"a": 3, "b": "y", "c": 0.5},
    ]


def test_grid_over_nested_and_structured_values() -> None:
    cfg = config("grid", HPARAMS)
    trials = generate_trials(cfg, seed=0)
    assert hyperparameters_grid_size(cfg.hyperparameters) == len(trials) == 2 * 2 * 3 * 2
    assert trials[0] == {
        "act": {"name": "relu"},
        "const": 3,
        "dropout": 0.0,
        "empty": {},
        "lr": pytest.approx(1e-4),
        "lst": [1, 2],
        "opt": {"momentum": pytest.approx(0.7), "nesterov": True},
        "units": 8,
    }
    assert trials[-1]["act"] == ["tanh", 2]
    assert trials[-1]["dropout"] == 0.5
    assert trials[-1]["lr"] == pytest.approx(1e-2)
    assert trials[-1]["units"] == 64
    # first axis ("act") varies slowest, the last ("units") fastest
    assert [t["units"] for t in trials[:4]] == [8, 64, 8, 64]
    assert all(t["act"] == {"name": "relu"} for t in trials[:12])


def test_grid_trials_do_not_share_values() -> None:
    cfg = config("grid", HPARAMS)
    trials = generate_trials(cfg, seed=0)
    trials[0]["act"]["name"] = "changed"
    trials[0]["lst"].append(3)
    assert trials[2]["act"] == {"name": "relu"}
    assert trials[1]["lst"] == [1, 2]
    assert generate_trials(cfg, seed=0)[0]["act"] == {"name": "relu"}
    assert cfg.hyperparameters["act"].vals[0] == {"name": "relu"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("minval", "maxval", "count", "values"),
    [
        (0, 10, 4, [0, 3, 7, 10]),  # 0, 3.33, 6.67, 10
        (1, 5, 5, [1, 2, 3, 4, 5]),
        (1, 5, 3, [1, 3, 5]),
        (-3, 2, 3, [-3, -1, 2]),  # -0.5 rounds away from zero
        (0, 3, 10, [0, 1, 2, 3]),  # more points than integers: every integer
        (5, 5, 3, [5]),
        (1, 64, 1, [33]),  # one point: the middle, 32.5 rounded up
        (8, 64, 2, [8, 64]),
    ],
)
def test_int_axis(minval: int, maxval: int, count: int, values: list[int]) -> None:
    assert grid_values(IntHyperparameter(minval=minval, maxval=maxval, count=count)) == values


def test_double_and_log_axes() -> None:
    assert grid_values(DoubleHyperparameter(minval=0, maxval=1, count=5)) == [0, 0.25, 0.5, 0.75, 1]
    assert grid_values(DoubleHyperparameter(minval=0, maxval=1, count=1)) == [0.5]
    assert grid_values(LogHyperparameter(minval=-3, maxval=-1, count=3)) == pytest.approx(
        [1e-3, 1e-2, 1e-1]
    )
    assert grid_values(LogHyperparameter(base=2, minval=0, maxval=4, count=3)) == [1, 4, 16]
    assert grid_values(LogHyperparameter(base=2, minval=2, maxval=4, count=1)) == [8]


@pytest.mark.parametrize(
    "hparams",
    [
        {},
        {"a": {"type": "int", "minval": 0, "maxval": 3, "count": 100}},
        {"a": {"type": "int", "minval": -7, "maxval": 7, "count": 6}, "b": {"x": {"y": 1}}},
        HPARAMS,
    ],
)
def test_grid_size_matches_the_trials(hparams: dict[str, Any]) -> None:
    cfg = config("grid", hparams)
    assert hyperparameters_grid_size(cfg.hyperparameters) == len(generate_trials(cfg, seed=0))


def test_grid_without_hyperparameters_is_one_trial() -> None:
    assert generate_trials(config("grid", {}), seed=0) == [{}]


# --- random -------------------------------------------------------------------------------------

RANDOM_HPARAMS = {
    "units": {"type": "int", "minval": 1, "maxval": 3},
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "act": {"type": "categorical", "vals": ["relu", [1, 2], {"k": "v"}]},
    "opt": {"wd": {"type": "double", "minval": 0.0, "maxval": 0.1}, "name": "sgd"},
    "batch": 32,
}


def test_random_draws_in_sorted_name_order_from_one_seeded_generator() -> None:
    rng = random.Random(1234)
    expected = []
    for _ in range(5):  # names sorted: act, batch, lr, opt.name, opt.wd, units
        act = rng.choice(["relu", [1, 2], {"k": "v"}])
        lr = 10 ** rng.uniform(-4, -1)
        wd = rng.uniform(0.0, 0.1)
        units = rng.randint(1, 3)
        expected.append(
            {"act": act, "batch": 32, "lr": lr, "opt": {"name": "sgd", "wd": wd}, "units": units}
        )
    assert generate_trials(config("random", RANDOM_HPARAMS, max_trials=5), seed=1234) == expected


def test_random_is_pinned_for_replay() -> None:
    # Workflows replay this: a change of sampling order or algorithm must show up here.
    hparams = {
        "n": {"type": "int", "minval": 0, "maxval": 100},
        "x": {"type": "double", "minval": 0, "maxval": 1},
    }
    trials = generate_trials(config("random", hparams, max_trials=2), seed=42)
    assert trials == [
        {"n": 81, "x": 0.11133106816568039},
        {"n": 94, "x": 0.27502931836911926},
    ]


def test_random_same_seed_same_trials_other_seed_other_trials() -> None:
    cfg = config("random", RANDOM_HPARAMS, max_trials=20)
    first = generate_trials(cfg, seed=7)
    assert generate_trials(cfg, seed=7) == first
    assert generate_trials(stored_config(cfg.model_dump(mode="json")), seed=7) == first
    assert generate_trials(cfg, seed=8) != first
    assert len(first) == 20


def test_random_does_not_depend_on_key_order() -> None:
    reordered = dict(reversed(list(RANDOM_HPARAMS.items())))
    assert generate_trials(config("random", reordered, max_trials=5), seed=3) == generate_trials(
        config("random", RANDOM_HPARAMS, max_trials=5), seed=3
    )


def test_random_values_stay_in_range_and_reach_both_int_ends() -> None:
    trials = generate_trials(config("random", RANDOM_HPARAMS, max_trials=300), seed=0)
    assert {t["units"] for t in trials} == {1, 2, 3}
    assert all(1e-4 <= t["lr"] <= 1e-1 for t in trials)
    assert all(0.0 <= t["opt"]["wd"] <= 0.1 for t in trials)
    assert all(t["batch"] == 32 and t["opt"]["name"] == "sgd" for t in trials)
    acts = [t["act"] for t in trials]
    assert "relu" in acts and [1, 2] in acts and {"k": "v"} in acts


def test_random_structured_values_are_copies() -> None:
    cfg = config("random", {"a": {"type": "categorical", "vals": [[1]]}, "c": [9]}, max_trials=2)
    trials = generate_trials(cfg, seed=0)
    trials[0]["a"].append(2)
    trials[0]["c"].append(2)
    assert trials[1] == {"a": [1], "c": [9]}
    assert generate_trials(cfg, seed=0) == [{"a": [1], "c": [9]}] * 2


# --- trial seeds --------------------------------------------------------------------------------


def test_trial_seed_is_deterministic_and_in_range() -> None:
    seeds = [trial_seed(42, request_id) for request_id in range(200)]
    assert seeds == [trial_seed(42, request_id) for request_id in range(200)]
    assert all(0 <= s < 2**31 for s in seeds)
    assert len(set(seeds)) == len(seeds)
    assert trial_seed(43, 0) != trial_seed(42, 0)
    assert trial_seed(7, 0) == 713722282  # pinned: stored seeds must not change meaning


# --- without max_length ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("searcher", "fields"), [("single", {}), ("grid", {}), ("random", {"max_trials": 3})]
)
def test_without_max_length_trials_get_no_target(searcher: str, fields: dict[str, Any]) -> None:
    """Determined 0.38: the training code decides how long to train."""
    raw = raw_config(searcher, {"x": {"type": "int", "minval": 1, "maxval": 3, "count": 3}},
                     **fields)
    del raw["searcher"]["max_length"]
    creates = make_search(validate_experiment_config(raw), seed=1).initial()
    assert creates and all(isinstance(op, Create) for op in creates)
    assert {(op.target, op.decision) for op in creates if isinstance(op, Create)} == {(None, None)}
    with_length = make_search(config(searcher, {}, **fields), seed=1).initial()
    assert {op.target for op in with_length if isinstance(op, Create)} == {10}
