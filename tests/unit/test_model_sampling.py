"""Model-based sampling (activities/model_sampling.py): Optuna's samplers drawing a trial's
hyperparameters from what the trials before it reported, and the config that asks for them."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest

from activities.model_sampling import (
    Observation,
    at_one_length,
    importance,
    propose,
    rank_hyperparameters,
)
from common.expconf import ConfigError, stored_config, validate_experiment_config
from services.errors import Invalid
from services.submission import normalized_config
from workflows.searchers import make_search
from workflows.searchers.base import Create

SPACE: dict[str, Any] = {
    "x": {"type": "double", "minval": 0.0, "maxval": 1.0},
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "units": {"type": "int", "minval": 16, "maxval": 256},
    "layers": {"type": "categorical", "vals": [[64, 64], [128], {"deep": True}]},
    "fixed": 3,
    "optimizer": {"momentum": {"type": "double", "minval": 0.5, "maxval": 0.99}, "name": "sgd"},
}


def config(searcher: dict[str, Any], space: dict[str, Any] | None = None) -> dict[str, Any]:
    raw = {"entrypoint": "python3 train.py", "hyperparameters": space or SPACE,
           "searcher": {"metric": "loss", "max_length": {"batches": 100}, **searcher}}
    return validate_experiment_config(raw).model_dump(mode="json")


def test_a_draw_is_in_the_space_nested_like_it_and_the_same_for_the_same_inputs() -> None:
    optuna = config({"name": "optuna", "max_trials": 10})
    drawn = propose(optuna, [], seed=7)
    assert 0 <= drawn["x"] <= 1 and 1e-4 <= drawn["lr"] <= 1e-1
    assert isinstance(drawn["units"], int) and 16 <= drawn["units"] <= 256
    assert drawn["layers"] in SPACE["layers"]["vals"]
    assert drawn["fixed"] == 3 and drawn["optimizer"]["name"] == "sgd"
    assert 0.5 <= drawn["optimizer"]["momentum"] <= 0.99
    assert propose(optuna, [], seed=7) == drawn
    assert propose(optuna, [], seed=8) != drawn


def test_tpe_draws_near_the_best_of_what_was_reported() -> None:
    """f(x) = (x - 0.3)^2: after 30 random trials, TPE's draws sit closer to 0.3 than random
    draws do (0.25 on average for uniform draws on [0, 1])."""
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    tpe = config({"name": "optuna", "max_trials": 50, "sampler": {"name": "tpe"}}, space)
    rng = random.Random(0)
    seen = []
    for _ in range(30):
        x = rng.random()
        seen.append(Observation({"x": x}, "complete", value=(x - 0.3) ** 2))
    distances = [abs(propose(tpe, seen, seed)["x"] - 0.3) for seed in range(20)]
    assert statistics.fmean(distances) < 0.12, distances


def test_running_and_stopped_trials_count_and_strangers_are_skipped() -> None:
    space = {"x": {"type": "double", "minval": 0.0, "maxval": 1.0}}
    cmaes = config({"name": "optuna", "max_trials": 5, "sampler": {"name": "cmaes"}}, space)
    seen = [
        Observation({"x": 0.5}, "running"),
        Observation({"x": 0.9}, "pruned", intermediate={10: 0.8, 20: 0.7}),
        Observation({"x": 0.2}, "complete", value=0.01, intermediate={100: 0.01}),
        Observation({"y": 1.0}, "complete", value=0.5),  # another space's trial
    ]
    assert 0 <= propose(cmaes, seen, seed=1)["x"] <= 1


def test_with_early_stopping_trials_are_compared_at_the_longest_length_enough_reached() -> None:
    seen = [
        Observation({"x": 0.1}, "pruned", intermediate={4: 0.9}),
        Observation({"x": 0.2}, "pruned", intermediate={4: 0.8, 16: 0.7}),
        Observation({"x": 0.3}, "complete", value=0.2, intermediate={4: 0.6, 16: 0.5, 64: 0.2}),
        Observation({"x": 0.4}, "running"),
    ]
    assert at_one_length(seen, enough=2) == [
        Observation({"x": 0.2}, "complete", value=0.7, intermediate={16: 0.7}),
        Observation({"x": 0.3}, "complete", value=0.5, intermediate={16: 0.5}),
        Observation({"x": 0.4}, "running"),
    ]
    assert at_one_length(seen, enough=4) == seen  # no length has enough: as they are


def test_searchers_with_a_sampler_leave_hyperparameters_to_the_draw() -> None:
    optuna = config({"name": "optuna", "max_trials": 3, "max_concurrent_trials": 2})
    creates = make_search(stored_config(optuna), seed=1).initial()
    assert [(c.request_id, c.hparams, c.target) for c in creates if isinstance(c, Create)] == [
        (0, None, 100), (1, None, 100), (2, None, 100)]
    asha = config({"name": "adaptive_asha", "max_trials": 8, "sampler": {"name": "tpe"}})
    assert all(isinstance(c, Create) and c.hparams is None
               for c in make_search(stored_config(asha), seed=1).initial())
    plain = config({"name": "adaptive_asha", "max_trials": 8})
    assert all(isinstance(c, Create) and c.hparams is not None
               for c in make_search(stored_config(plain), seed=1).initial())


def test_bad_sampler_settings_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        config({"name": "optuna", "max_trials": 3, "sampler": {"name": "bayes"}})
    assert "searcher.sampler.name" in str(err.value)
    text = ("entrypoint: python3 train.py\nhyperparameters: {x: {type: double, minval: 0, "
            "maxval: 1}}\nsearcher: {name: optuna, metric: loss, max_trials: 3, sampler: "
            "{name: tpe, options: {n_startup: 5}}}\n")
    with pytest.raises(Invalid) as refused:
        normalized_config(text, {"type": "shared_fs", "host_path": "/tmp"})
    assert refused.value.details == [
        "searcher.sampler.options.n_startup: not an option of Optuna's TPESampler (it takes "
        + refused.value.details[0].split("(it takes ", 1)[1]]
    assert "n_startup_trials" in refused.value.details[0]


def test_importance_names_the_hyperparameter_that_decides_the_metric() -> None:
    """The loss is set by the learning rate's distance from 1e-2.5 and a little by momentum;
    the other hyperparameters are noise. Constants are not ranked."""
    rng = random.Random(3)
    scored = []
    for _ in range(300):
        hparams = {"x": rng.random(), "lr": 10 ** rng.uniform(-4, -1),
                   "units": rng.randint(16, 256),
                   "layers": rng.choice(SPACE["layers"]["vals"]), "fixed": 3,
                   "optimizer": {"momentum": rng.uniform(0.5, 0.99), "name": "sgd"}}
        loss = abs(math.log10(hparams["lr"]) + 2.5) \
            + 0.2 * hparams["optimizer"]["momentum"]
        scored.append((hparams, loss))
    shares = importance(config({"name": "random", "max_trials": 300}), scored)
    assert set(shares) == {"x", "lr", "units", "layers", "optimizer.momentum"}
    assert next(iter(shares)) == "lr" and shares["lr"] > 0.5, shares
    assert sum(shares.values()) == pytest.approx(1.0)
    # Too few trials to say anything, or trials from another space (a fork's): nothing.
    assert importance(config({"name": "random", "max_trials": 3}), scored[:1]) == {}
    assert importance(config({"name": "random", "max_trials": 3}),
                      [({"other": 1}, 0.5), ({"other": 2}, 0.4)]) == {}


ISSUE_SPACE: dict[str, Any] = {
    "learning_rate": {"type": "log", "base": 10, "minval": -5, "maxval": -1},
    "weight_decay": {"type": "log", "base": 10, "minval": -6, "maxval": -2},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "batch_size": {"type": "categorical", "vals": [16, 32, 64, 128]},
}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("smaller_is_better", [True, False])
def test_importance_agrees_with_a_rank_correlation_where_one_hyperparameter_dominates(
    seed: int, smaller_is_better: bool
) -> None:
    """Issue 37's case: 40 trials of a search whose loss falls with the learning rate (Spearman's
    rho about -0.8) and is noise in the rest, which PED-ANOVA ranked below weight decay. The
    hyperparameter with the largest |rho| is first, by far more than the spread over bootstrap
    resamples, whichever the metric's direction."""
    from scipy.stats import spearmanr

    rng = random.Random(seed)
    scored = []
    for _ in range(40):
        hparams = {"learning_rate": 10 ** rng.uniform(-5, -1),
                   "weight_decay": 10 ** rng.uniform(-6, -2), "dropout": rng.uniform(0, 0.5),
                   "batch_size": rng.choice([16, 32, 64, 128])}
        loss = -0.3 * math.log10(hparams["learning_rate"]) + rng.gauss(0, 0.3)
        scored.append((hparams, loss if smaller_is_better else -loss))
    rho = {name: abs(spearmanr([h[name] for h, _ in scored], [v for _, v in scored])[0])
           for name in ISSUE_SPACE}
    assert max(rho, key=lambda name: rho[name]) == "learning_rate" and rho["learning_rate"] > 0.6
    found = rank_hyperparameters(config({"name": "random", "max_trials": 40,
                                         "smaller_is_better": smaller_is_better}, ISSUE_SPACE),
                                 scored)
    assert (found.method, found.resamples) == ("fANOVA", 10)
    assert list(found.shares)[0] == "learning_rate", found
    assert set(found.spread) == set(ISSUE_SPACE) and all(s >= 0 for s in found.spread.values())
    lr = found.shares["learning_rate"] - 2 * found.spread["learning_rate"]
    assert all(lr > share + 2 * found.spread[name]
               for name, share in found.shares.items() if name != "learning_rate"), found
