"""Model-based sampling: a new trial's hyperparameters from Optuna's samplers (TPE, CMA-ES, GP,
QMC, random), fitted on what the experiment's trials have reported so far.

A searcher with a `sampler` (`searcher.name: optuna`, or ASHA's `sampler`) creates trials whose
hyperparameters are left to be drawn; the experiment workflow draws them with the
`sample_trial_hparams` activity just before it creates each trial. The study is rebuilt from
the database every time (the finished trials with their searcher metric, the ones ASHA stopped
with their validations as intermediate values, the running ones as running), so nothing but the
trials table holds its state: a crash of any part loses nothing, and the draw, once made, is in
the workflow's history. The sampler's seed is the trial's seed, so a retried draw over the same
trials draws the same values.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from temporalio import activity
from temporalio.exceptions import ApplicationError

from common.expconf import (
    CategoricalHyperparameter,
    ConstHyperparameter,
    DoubleHyperparameter,
    HyperparameterGroup,
    IntHyperparameter,
    LogHyperparameter,
    iter_hyperparameters,
    validate_experiment_config,
)
from common.states import TERMINAL_STATES
from common.temporal_names import SAMPLE_TRIAL_HPARAMS
from workflows.searchers import trial_seed
from workflows.searchers.hparams import nest
from workflows.types import SampleHparamsInput

SAMPLERS = ("tpe", "cmaes", "gp", "qmc", "random")


@dataclass(frozen=True)
class Observation:
    """One trial as the sampler sees it: its hyperparameters and what it reported."""

    hparams: dict[str, Any]
    state: str  # "complete" | "pruned" | "running"
    value: float | None = None  # the searcher metric at its last validation (complete)
    intermediate: dict[int, float] = field(default_factory=dict)  # length -> searcher metric


def _path_name(path: tuple[str, ...]) -> str:
    return ".".join(path)


def _distribution(hp: Any) -> Any:
    """Optuna's distribution of one hyperparameter; None for what is not sampled (a const).
    Categories are sampled by index, so any JSON value can be one."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    if isinstance(hp, IntHyperparameter):
        return IntDistribution(hp.minval, hp.maxval)
    if isinstance(hp, DoubleHyperparameter):
        return FloatDistribution(hp.minval, hp.maxval)
    if isinstance(hp, LogHyperparameter):
        return FloatDistribution(hp.base**hp.minval, hp.base**hp.maxval, log=True)
    if isinstance(hp, CategoricalHyperparameter):
        return CategoricalDistribution(list(range(len(hp.vals))))
    if isinstance(hp, ConstHyperparameter | HyperparameterGroup):
        return None
    raise TypeError(f"not a hyperparameter: {hp!r}")


def _lookup(hparams: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = hparams
    for name in path:
        node = node[name]
    return node


def _param(hp: Any, value: Any) -> Any:
    """A trial's value as Optuna's parameter (a category's index)."""
    if isinstance(hp, CategoricalHyperparameter):
        return hp.vals.index(value)
    if isinstance(hp, IntHyperparameter):
        return int(value)
    return float(value)


def _sampler_class(name: str) -> Any:
    import optuna

    return {
        "tpe": optuna.samplers.TPESampler,
        "cmaes": optuna.samplers.CmaEsSampler,
        "gp": optuna.samplers.GPSampler,
        "qmc": optuna.samplers.QMCSampler,
        "random": optuna.samplers.RandomSampler,
    }[name]


def missing_package(name: str) -> str | None:
    """The package sampler `name` needs and this master lacks (GP: torch), or None."""
    needs = {"gp": "torch", "cmaes": "cmaes"}.get(name)
    if needs is None or importlib.util.find_spec(needs) is not None:
        return None
    return needs


def make_sampler(name: str, options: Mapping[str, Any], seed: int) -> Any:
    """Optuna's sampler `name` with the user's `options` (its constructor's keywords)."""
    return _sampler_class(name)(**{**options, "seed": seed})


def check_sampler_options(name: str, options: Mapping[str, Any]) -> str | None:
    """What is wrong with `options` for sampler `name` (an unknown keyword), or None."""
    cls = _sampler_class(name)
    if not options:
        return None
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "seed"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        return (f"{', '.join(unknown)}: not an option of Optuna's {cls.__name__} "
                f"(it takes {', '.join(sorted(accepted))})")
    return None


def at_one_length(observations: list[Observation], enough: int) -> list[Observation]:
    """With early stopping, trials are compared at one length (as BOHB does): the longest at
    which at least `enough` trials reported, each with its value there; trials that stopped
    before it drop out (running ones stay). Without `enough` at any length, as they are."""
    counts: dict[int, int] = {}
    for seen in observations:
        for length in seen.intermediate:
            counts[length] = counts.get(length, 0) + 1
    lengths = [length for length, n in counts.items() if n >= enough]
    if not lengths:
        return observations
    at = max(lengths)
    return [seen if seen.state == "running"
            else Observation(seen.hparams, "complete", value=seen.intermediate[at],
                             intermediate={at: seen.intermediate[at]})
            for seen in observations if seen.state == "running" or at in seen.intermediate]


def propose(config: Mapping[str, Any], observations: list[Observation],
            seed: int) -> dict[str, Any]:
    """The next trial's hyperparameters, from the config's sampler fitted on `observations`.

    `config` is a stored (validated) experiment config whose searcher has a `sampler`; `seed`
    seeds the sampler (the trial's seed). Same inputs, same answer."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    parsed = validate_experiment_config(dict(config))
    searcher = config["searcher"]
    sampler_config = searcher["sampler"]
    leaves = list(iter_hyperparameters(parsed.hyperparameters))
    distributions = {_path_name(path): d for path, hp in leaves
                     if (d := _distribution(hp)) is not None}
    if any(seen.state == "pruned" for seen in observations):
        observations = at_one_length(observations, len(distributions) + 2)
    study = optuna.create_study(
        direction="minimize" if searcher.get("smaller_is_better", True) else "maximize",
        sampler=make_sampler(sampler_config["name"], sampler_config.get("options") or {}, seed))
    for seen in observations:
        try:
            params = {_path_name(path): _param(hp, _lookup(seen.hparams, path))
                      for path, hp in leaves if _path_name(path) in distributions}
        except (KeyError, ValueError, TypeError):
            continue  # hyperparameters from another space (a forked experiment's): not ours
        state = {"complete": optuna.trial.TrialState.COMPLETE,
                 "pruned": optuna.trial.TrialState.PRUNED,
                 "running": optuna.trial.TrialState.RUNNING}[seen.state]
        if state == optuna.trial.TrialState.COMPLETE and seen.value is None:
            continue
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=distributions, state=state,
            value=seen.value if state == optuna.trial.TrialState.COMPLETE else None,
            intermediate_values=dict(seen.intermediate)))
    trial = study.ask(distributions)

    def value(path: tuple[str, ...], hp: Any) -> Any:
        if isinstance(hp, CategoricalHyperparameter):
            return hp.vals[trial.params[_path_name(path)]]
        if _path_name(path) in distributions:
            return trial.params[_path_name(path)]
        return copy.deepcopy(hp.val) if isinstance(hp, ConstHyperparameter) else {}

    return nest((path, value(path, hp)) for path, hp in leaves)


async def observations(pool: asyncpg.Pool, experiment_id: int,
                       metric: str) -> list[Observation]:
    """The experiment's trials as the sampler sees them (failed ones are left out)."""
    rows = await pool.fetch(
        "SELECT t.id, t.hparams, t.state, t.search_status,"
        " array_agg(m.steps_completed ORDER BY m.steps_completed)"
        "   FILTER (WHERE m.id IS NOT NULL) AS steps,"
        " array_agg((m.metrics ->> $2)::float8 ORDER BY m.steps_completed)"
        "   FILTER (WHERE m.id IS NOT NULL) AS values"
        " FROM trials t LEFT JOIN metrics m ON m.trial_id = t.id"
        "  AND m.metric_group = 'validation' AND jsonb_typeof(m.metrics -> $2) = 'number'"
        " WHERE t.experiment_id = $1 GROUP BY t.id ORDER BY t.id",
        experiment_id, metric)
    found = []
    for row in rows:
        reported = {int(s): float(v) for s, v in zip(row["steps"] or [], row["values"] or [],
                                                      strict=True) if math.isfinite(v)}
        stopped = (row["search_status"] or "").startswith("stopped early")
        if row["state"] not in TERMINAL_STATES:
            found.append(Observation(row["hparams"], "pruned" if stopped else "running",
                                     intermediate=reported if stopped else {}))
        elif row["state"] == "COMPLETED" and reported:
            last = reported[max(reported)]
            found.append(Observation(row["hparams"], "pruned" if stopped else "complete",
                                     value=None if stopped else last, intermediate=reported))
    return found


class SamplingActivities:
    """The `sample_trial_hparams` activity, on the master's database pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @activity.defn(name=SAMPLE_TRIAL_HPARAMS)
    async def sample_trial_hparams(self, inp: SampleHparamsInput) -> dict[str, Any]:
        config = await self._pool.fetchval(
            "SELECT config FROM experiments WHERE id = $1", inp.experiment_id)
        if config is None:
            raise ApplicationError(f"experiment {inp.experiment_id} not found",
                                   non_retryable=True)
        seen = await observations(self._pool, inp.experiment_id, config["searcher"]["metric"])
        try:
            return await asyncio.to_thread(
                propose, config, seen, trial_seed(inp.experiment_seed, inp.request_id))
        except ImportError as err:  # gp needs torch, cmaes the cmaes package
            raise ApplicationError(
                f"searcher.sampler {config['searcher']['sampler']['name']!r} cannot run on "
                f"this master: {err}", non_retryable=True) from err
