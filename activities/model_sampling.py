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
    stored_config,
)
from common.states import TERMINAL_STATES, TrialState
from common.temporal_names import SAMPLE_TRIAL_HPARAMS
from wire.workflow_io import SampleHparamsInput
from workflows.searchers import trial_seed
from workflows.searchers.hparams import nest


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


def make_sampler(name: str, options: Mapping[str, Any], seed: int) -> Any:
    """Optuna's sampler `name` with the user's `options` (its constructor's keywords)."""
    return _sampler_class(name)(**{**options, "seed": seed})


def sampler_problem(sampler: Mapping[str, Any]) -> str | None:
    """What keeps a config's `searcher.sampler` from running on this master (a package its
    sampler needs, an option its constructor does not take), as the API says it; or None."""
    name, options = sampler["name"], sampler["options"]
    needs = {"gp": "torch", "cmaes": "cmaes"}.get(name)
    if needs is not None and importlib.util.find_spec(needs) is None:
        return (f"searcher.sampler.name: {name!r} needs the {needs} package, which this master "
                "does not have; install it there or choose another sampler")
    if not options:
        return None
    cls = _sampler_class(name)
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "seed"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        return (f"searcher.sampler.options.{', '.join(unknown)}: not an option of Optuna's "
                f"{cls.__name__} (it takes {', '.join(sorted(accepted))})")
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


Space = tuple[list[tuple[tuple[str, ...], Any]], dict[str, Any]]


def _space(config: Mapping[str, Any]) -> Space:
    """The config's hyperparameters (path, definition) and Optuna's distribution of each sampled
    one, by dotted name."""
    parsed = stored_config(config)
    leaves = list(iter_hyperparameters(parsed.hyperparameters))
    return leaves, {_path_name(path): d for path, hp in leaves
                    if (d := _distribution(hp)) is not None}


def _study(config: Mapping[str, Any], space: Space, observations: list[Observation],
           sampler: Any = None) -> Any:
    """An Optuna study holding `observations` in the config's `space` (trials whose
    hyperparameters are from another space, a forked experiment's, are left out)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    leaves, distributions = space
    study = optuna.create_study(
        direction="minimize" if config["searcher"].get("smaller_is_better", True) else "maximize",
        sampler=sampler)
    states = {"complete": optuna.trial.TrialState.COMPLETE,
              "pruned": optuna.trial.TrialState.PRUNED,
              "running": optuna.trial.TrialState.RUNNING}
    for seen in observations:
        try:
            params = {_path_name(path): _param(hp, _lookup(seen.hparams, path))
                      for path, hp in leaves if _path_name(path) in distributions}
        except (KeyError, ValueError, TypeError):
            continue
        if seen.state == "complete" and seen.value is None:
            continue
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=distributions, state=states[seen.state],
            value=seen.value if seen.state == "complete" else None,
            intermediate_values=dict(seen.intermediate)))
    return study


def propose(config: Mapping[str, Any], observations: list[Observation],
            seed: int) -> dict[str, Any]:
    """The next trial's hyperparameters, from the config's sampler fitted on `observations`.

    `config` is a stored (validated) experiment config whose searcher has a `sampler`; `seed`
    seeds the sampler (the trial's seed). Same inputs, same answer."""
    sampler_config = config["searcher"]["sampler"]
    leaves, distributions = space = _space(config)
    if any(seen.state == "pruned" for seen in observations):
        observations = at_one_length(observations, len(distributions) + 2)
    study = _study(config, space, observations, make_sampler(
        sampler_config["name"], sampler_config.get("options") or {}, seed))
    trial = study.ask(distributions)

    def value(path: tuple[str, ...], hp: Any) -> Any:
        if isinstance(hp, CategoricalHyperparameter):
            return hp.vals[trial.params[_path_name(path)]]
        if _path_name(path) in distributions:
            return trial.params[_path_name(path)]
        return copy.deepcopy(hp.val) if isinstance(hp, ConstHyperparameter) else {}

    return nest((path, value(path, hp)) for path, hp in leaves)


IMPORTANCE_METHOD = "fANOVA"
IMPORTANCE_RESAMPLES = 10
# A forest this size takes under 1 s for 1,000 trials where Optuna's default (64 trees, depth
# 64) takes 36 s, and ranks the same.
_FOREST = {"n_trees": 16, "max_depth": 6}


@dataclass(frozen=True)
class Importance:
    """Each hyperparameter's share of the metric's variance (largest first, summing to 1) and
    the standard deviation of that share over `resamples` bootstrap resamples of the trials."""

    shares: dict[str, float]
    spread: dict[str, float]
    method: str = IMPORTANCE_METHOD
    resamples: int = IMPORTANCE_RESAMPLES


def _log_scaled(trials: list[Any]) -> list[Any]:
    """Trials whose log-scale hyperparameters are given as their log10 on a linear scale: the
    forest's variance is taken over the space as it was searched, not over raw values (on
    1e-4..1e-1 raw, nine tenths of the range lies above 1e-2, and a learning rate that decides
    the loss looked unimportant)."""
    import optuna
    from optuna.distributions import FloatDistribution

    scaled = []
    for trial in trials:
        params, distributions = dict(trial.params), dict(trial.distributions)
        for name, dist in trial.distributions.items():
            if isinstance(dist, FloatDistribution) and dist.log:
                distributions[name] = FloatDistribution(math.log10(dist.low),
                                                        math.log10(dist.high))
                params[name] = math.log10(params[name])
        scaled.append(optuna.trial.create_trial(
            params=params, distributions=distributions, value=trial.value))
    return scaled


def _fanova(trials: list[Any], names: list[str], seed: int) -> dict[str, float] | None:
    import optuna

    study = optuna.create_study()
    study.add_trials(trials)
    try:
        found = optuna.importance.get_param_importances(
            study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=seed, **_FOREST),
            normalize=True)
    except (ValueError, RuntimeError):  # every trial alike in every hyperparameter
        return None
    return {name: float(found.get(name, 0.0)) for name in names}


def rank_hyperparameters(config: Mapping[str, Any], scored: list[tuple[dict[str, Any], float]]
                         ) -> Importance:
    """Each sampled hyperparameter's importance for the searcher metric over `scored` trials
    (hyperparameters, metric), by Optuna's fANOVA evaluator (a random forest fitted to the
    metric, whose variance is split among the hyperparameters) on log-scaled values, with its
    spread over bootstrap resamples; no shares while fewer than two trials or no hyperparameter
    varies.

    Not PED-ANOVA, used before: it asks what sets the best tenth apart, four trials of forty,
    and ranked a hyperparameter with no rank correlation with the loss above one with
    rho = -0.81. fANOVA, like a rank correlation, looks at every trial, and also finds an
    effect that is not monotonic (a learning rate best in the middle of its range)."""
    import numpy as np

    space = _space(config)
    study = _study(
        config, space, [Observation(hparams, "complete", value=value) for hparams, value in scored])
    trials = _log_scaled(study.trials)
    names = sorted(space[1])
    whole = _fanova(trials, names, seed=0) if len(trials) >= 2 and names else None
    if whole is None:
        return Importance({}, {})
    rng = np.random.default_rng(0)
    resampled = [found for i in range(IMPORTANCE_RESAMPLES)
                 if (found := _fanova([trials[j] for j in rng.integers(0, len(trials),
                                                                       len(trials))],
                                      names, seed=i + 1)) is not None]
    shares = dict(sorted(whole.items(), key=lambda item: -item[1]))
    spread = {name: float(np.std([found[name] for found in resampled])) if resampled else 0.0
              for name in shares}
    return Importance(shares, spread)


def importance(config: Mapping[str, Any], scored: list[tuple[dict[str, Any], float]]
               ) -> dict[str, float]:
    """rank_hyperparameters' shares alone."""
    return rank_hyperparameters(config, scored).shares


def observation(hparams: dict[str, Any], *, ended: bool, stopped_early: bool,
                reports: dict[int, float]) -> Observation | None:
    """A trial as the sampler sees it, from whether it ended, whether its searcher stopped it
    early and its validations of the searcher metric (length -> value); None for one that
    ended without any."""
    if ended and not reports:
        return None
    if stopped_early:
        return Observation(hparams, "pruned", intermediate=reports)
    if not ended:
        return Observation(hparams, "running")
    return Observation(hparams, "complete", value=reports[max(reports)], intermediate=reports)


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
        if row["state"] in TERMINAL_STATES and row["state"] != TrialState.COMPLETED:
            continue
        reported = {int(s): float(v) for s, v in zip(row["steps"] or [], row["values"] or [],
                                                      strict=True) if math.isfinite(v)}
        seen = observation(row["hparams"], ended=row["state"] == TrialState.COMPLETED,
                           stopped_early=(row["search_status"] or "").startswith("stopped early"),
                           reports=reported)
        if seen is not None:
            found.append(seen)
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
                f"this master: {err}", type="SamplerError", non_retryable=True) from err
        except Exception as err:  # an option of the right name but not a value it works with
            raise ApplicationError(
                f"searcher.sampler {config['searcher']['sampler']['name']!r} failed: "
                f"{type(err).__name__}: {err}", type="SamplerError", non_retryable=True) from err
