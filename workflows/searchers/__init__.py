"""Epochal's searchers: single, grid and random decide their trials up front; async_halving and
adaptive_asha decide as validations arrive; optuna (and ASHA with a `sampler`) leaves each
trial's hyperparameters to be drawn when it is created.

Pure, seeded and replay-safe: no IO, no clock, no global random state, so an experiment workflow
can call them directly and get the same decisions on every replay. `make_search` builds the
SearchMethod the workflow drives.
"""

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from common.expconf import (
    AdaptiveAshaConfig,
    AsyncHalvingConfig,
    ExperimentConfig,
    OptunaConfig,
    RandomConfig,
)
from workflows.searchers.asha import AshaSearch
from workflows.searchers.base import JSON, SearchMethod
from workflows.searchers.fixed import FixedSearch
from workflows.searchers.grid import grid_trials
from workflows.searchers.hparams import default_hparams, sample_hparams
from workflows.searchers.random_search import random_trials
from workflows.searchers.single import single_trials

__all__ = [
    "default_hparams",
    "generate_trials",
    "make_search",
    "sample_hparams",
    "trial_seed",
]


def _random(config: ExperimentConfig, seed: int) -> list[dict[str, Any]]:
    assert isinstance(config.searcher, RandomConfig)
    return random_trials(config.hyperparameters, config.searcher.max_trials, seed)


def _sampled(config: ExperimentConfig, seed: int) -> list[dict[str, Any] | None]:
    assert isinstance(config.searcher, OptunaConfig)
    return [None] * config.searcher.max_trials


# Searchers that decide every trial up front; adaptive ones (ASHA) keep state instead.
_GENERATORS: dict[str, Callable[[ExperimentConfig, int], Sequence[dict[str, Any] | None]]] = {
    "single": lambda config, seed: single_trials(config.hyperparameters),
    "grid": lambda config, seed: grid_trials(config.hyperparameters),
    "random": _random,
    "optuna": _sampled,
}


def generate_trials(cfg: ExperimentConfig, seed: int) -> Sequence[dict[str, Any] | None]:
    """The hyperparameters of every trial of the experiment, in the order to create them; None
    for a trial whose hyperparameters its sampler draws when it is created (optuna).

    ``seed`` (the experiment seed) only matters to the random searcher. Same inputs, same list.
    """
    generate = _GENERATORS.get(cfg.searcher.name)
    if generate is None:
        raise ValueError(f"the {cfg.searcher.name} searcher does not decide its trials up front")
    return generate(cfg, seed)


def trial_seed(experiment_seed: int, request_id: int | str) -> int:
    """The seed of one trial, in [0, 2**31), derived from the experiment seed and its request."""
    digest = hashlib.sha256(f"{experiment_seed}/{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31


def make_search(cfg: ExperimentConfig, seed: int, state: JSON | None = None) -> SearchMethod:
    """The search method of an experiment, fresh or restored from `state` (its snapshot)."""
    if isinstance(cfg.searcher, AsyncHalvingConfig | AdaptiveAshaConfig):
        return AshaSearch(cfg.searcher, cfg.hyperparameters, seed, state)
    length = cfg.searcher.max_length
    return FixedSearch(
        lambda: generate_trials(cfg, seed),
        length.value if length is not None else None,
        getattr(cfg.searcher, "max_concurrent_trials", 0),  # single has none: one trial
        state,
    )
