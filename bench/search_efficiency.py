"""Search efficiency of Epochal's searchers on synthetic learning curves, next to Optuna's pruners.

Each configuration x (learning rate, units, dropout, momentum) has a known final loss f(x),
minimum 0.2 at lr=10^-2.5, units=128, dropout=0.2, momentum=0.9, and a learning curve

    loss(t) = f(x) + a(x) * ((t / T)^-b(x) - 1) + noise,        loss(T) = f(x) + noise,

where a faster learning rate learns faster (larger b) but a(x) and b(x) also carry a random
per-configuration part, so early rankings are noisy but informative; noise is N(0, 0.01),
fixed for a configuration, step and seed.

Epochal's real SearchMethod objects (`make_search` on a config checked by
`validate_experiment_config`) run in a discrete-event simulation: WORKERS trials train at once
(one length unit per time unit), each reports a validation at its decision points
(`Create.decision` / `Continue.decision`) and at its target, and the searcher's operations are
applied (Stop ends a trial, Continue sets its next decision/target or resumes it, Create queues a
trial). Optuna (RandomSampler, so only the pruning differs) reports at the same rung lengths and
runs sequentially. Compute is the total training length of all trials. The best trial of a search
is the trial trained to full length with the best final reported value; its regret is its TRUE
f(x) minus the optimum.

    .venv/bin/pip install -e '.[bench]'
    .venv/bin/python bench/search_efficiency.py [--seeds 30] [--max-trials 256] [--equal-speed] \
        [--smoke]

Prints one row per method (compute, best true f(x), regret: mean [min, max] over seeds), then
the goals: ASHA within 1% of random search's best using at most 1/3 of its compute; adaptive ASHA
at least as good as Optuna's Hyperband at equal compute (Hyperband gets the adaptive search's
compute, seed by seed, as its budget). Then the searcher's own decision time per event in a
10,000-trial adaptive_asha search, and a one-line summary.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from activities.model_sampling import Observation, observation, propose  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from common.expconf import stored_config, validate_experiment_config  # noqa: E402
from workflows.searchers import make_search, trial_seed  # noqa: E402
from workflows.searchers.base import (  # noqa: E402
    Continue,
    Create,
    Op,
    SearchMethod,
    Stop,
    trial_hparams,
)

T = 256  # the full training length
DIVISOR = 4
RUNGS = [4, 16, 64, 256]  # async_halving's 4 rungs; Optuna reports at the same lengths
WORKERS = 16
OPTIMUM = 0.2
NOISE = 0.01

HPARAMS: dict[str, Any] = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "units": {"type": "int", "minval": 16, "maxval": 256},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "momentum": {"type": "double", "minval": 0.5, "maxval": 0.99},
}


# --- the benchmark problem ----------------------------------------------------------------------


def final_loss(hp: Mapping[str, Any]) -> float:
    """f(x): the loss a configuration ends at; its minimum is OPTIMUM."""
    u = math.log10(float(hp["lr"]))
    w = math.log2(float(hp["units"]))
    dropout, momentum = float(hp["dropout"]), float(hp["momentum"])
    return (
        OPTIMUM
        + 0.35 * ((u + 2.5) / 1.5) ** 2
        + 0.10 * ((w - 7) / 3) ** 2
        + 0.15 * ((dropout - 0.2) / 0.3) ** 2
        + 0.10 * ((momentum - 0.9) / 0.4) ** 2
    )


def _key(hp: Mapping[str, Any]) -> tuple[float, int, float, float]:
    return (float(hp["lr"]), int(hp["units"]), float(hp["dropout"]), float(hp["momentum"]))


class Curves:
    """Learning curves of one seed: the same x gives the same curve to every method."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._shape: dict[tuple[float, int, float, float], tuple[float, float, float]] = {}

    def shape(self, hp: Mapping[str, Any]) -> tuple[float, float, float]:
        key = _key(hp)
        cached = self._shape.get(key)
        if cached is None:
            rng = random.Random(hash((self.seed, *key)))
            speed = (math.log10(hp["lr"]) + 4) / 3  # 0 (slow) .. 1 (fast)
            a = 0.06 * (1 + hp["dropout"]) * math.exp(0.4 * rng.gauss(0, 1))
            b = min(max(0.25 + 0.35 * speed + 0.1 * rng.gauss(0, 1), 0.1), 1.0)
            cached = (final_loss(hp), a, b)
            self._shape[key] = cached
        return cached

    def loss(self, hp: Mapping[str, Any], t: int) -> float:
        f, a, b = self.shape(hp)
        noise = random.Random(hash((self.seed, t, *_key(hp)))).gauss(0, NOISE)
        return f + a * (math.pow(t / T, -b) - 1) + noise


def varied_pace(hp: Mapping[str, Any]) -> float:
    """Time per unit of length: wider models train slower (0.56 to 1.5), so trials reach
    their rungs out of creation order, as on a real cluster."""
    return 0.5 + float(hp["units"]) / 256


def equal_pace(hp: Mapping[str, Any]) -> float:
    return 1.0


# --- Epochal's searchers in a discrete-event simulation -----------------------------------------


@dataclass
class Trial:
    hparams: dict[str, Any] | None  # None: the sampler draws them when the trial starts
    target: int
    decision: int | None
    done: int = 0  # length trained so far
    last: float = math.inf  # last reported value
    reports: dict[int, float] = field(default_factory=dict)  # length -> reported value


@dataclass
class Result:
    compute: int
    true_best: float  # f(x) of the best trial trained to full length
    trials: int
    makespan: float = 0.0  # time until the last report, with WORKERS workers
    decision_seconds: float = 0.0
    events: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def epochal_config(name: str, max_trials: int, **fields: Any) -> dict[str, Any]:
    searcher = {
        "name": name,
        "metric": "loss",
        "max_length": {"batches": T},
        "max_trials": max_trials,
        "max_concurrent_trials": WORKERS,
        **fields,
    }
    config = {"entrypoint": "python3 train.py", "hyperparameters": HPARAMS, "searcher": searcher}
    return validate_experiment_config(config).model_dump(mode="json")


def simulate(
    config: Mapping[str, Any],
    seed: int,
    loss: Callable[[Any, int], float],
    pace: Callable[[Any], float],
) -> Result:
    search: SearchMethod = make_search(stored_config(config), seed)
    trials: dict[int, Trial] = {}
    queue: deque[int] = deque()  # trials waiting for a worker (new, or promoted from a rung)
    events: list[tuple[float, int, int]] = []  # (time, sequence, request) of the next report
    closing: deque[int] = deque()
    running: set[int] = set()  # trials holding a worker
    stopped: set[int] = set()
    paused: set[int] = set()  # waiting at a rung for a promotion
    spent = 0.0
    calls = 0
    now = 0.0
    compute = seq = 0
    best: tuple[float, float] = (math.inf, math.inf)  # (final reported value, true f)

    def call(fn: Callable[..., list[Op]], *args: Any) -> list[Op]:
        nonlocal spent, calls
        start = time.perf_counter()
        ops = fn(*args)
        spent += time.perf_counter() - start
        calls += 1
        return ops

    def apply(ops: list[Op]) -> None:
        for op in ops:
            if isinstance(op, Create):
                trials[op.request_id] = Trial(op.hparams, op.target, op.decision)
                queue.append(op.request_id)
            elif isinstance(op, Continue):
                trial = trials[op.request_id]
                if op.target is not None:
                    trial.target = op.target
                trial.decision = op.decision
                if op.request_id in paused:
                    paused.discard(op.request_id)
                    queue.append(op.request_id)
            elif isinstance(op, Stop):
                stopped.add(op.request_id)
                paused.discard(op.request_id)
                closing.append(op.request_id)

    def next_point(trial: Trial) -> int:
        if trial.decision is not None and trial.decision > trial.done:
            return min(trial.decision, trial.target)
        return trial.target

    def observed() -> list[Observation]:
        """The trials as a sampler sees them (activities/model_sampling.observations)."""
        seen = [observation(t.hparams, ended=t.done == T, stopped_early=rid in stopped
                            and t.done < T, reports=dict(t.reports))
                for rid, t in trials.items() if t.hparams is not None]
        return [o for o in seen if o is not None]

    def schedule(request: int) -> None:
        nonlocal seq, spent
        seq += 1
        trial = trials[request]
        if trial.hparams is None:  # drawn as the workflow does, just before the trial starts
            began = time.perf_counter()
            trial.hparams = propose(config, observed(), trial_seed(seed, request))
            spent += time.perf_counter() - began
        heapq.heappush(
            events, (now + (next_point(trial) - trial.done) * pace(trial.hparams), seq, request)
        )

    apply(call(search.initial))
    limit = search.concurrency() or WORKERS
    while True:
        while closing:
            request = closing.popleft()
            running.discard(request)
            apply(call(search.on_closed, request, None))
        while queue and len(running) < min(limit, WORKERS):
            request = queue.popleft()
            running.add(request)
            schedule(request)
        if not events:
            if search.waiting():
                apply(call(search.finish_waiting))
                continue
            if closing or queue:
                continue
            break
        now, _, request = heapq.heappop(events)
        trial = trials[request]
        point = next_point(trial)
        compute += point - trial.done
        trial.done = point
        assert trial.hparams is not None
        value = loss(trial.hparams, point)
        trial.last = value
        trial.reports[point] = value
        if point == T:
            best = min(best, (value, final_loss(trial.hparams)))
        if trial.decision == point or trial.decision is None:
            apply(call(search.on_validation, request, point, value))
        if request in stopped:
            continue  # ends: `closing` frees its worker
        if request in search.waiting():
            paused.add(request)
            running.discard(request)
        elif trial.done < trial.target:
            schedule(request)
        else:
            stopped.add(request)
            closing.append(request)
    return Result(compute, best[1], len(trials), now, spent, calls)


# --- Optuna -------------------------------------------------------------------------------------


def draws(seed: int, count: int) -> list[dict[str, Any]]:
    """The configurations Epochal's ASHA searchers try, request by request."""
    space = validate_experiment_config(epochal_config("random", 1)).hyperparameters
    return [trial_hparams(space, seed, i) for i in range(count)]


def optuna_search(
    pruner: optuna.pruners.BasePruner,
    seed: int,
    curves: Curves,
    max_trials: int | None,
    budget: int | None = None,
) -> Result:
    """Optuna: max_trials trials, or as many as fit in `budget`. Trials are enqueued with the
    configurations Epochal's ASHA draws (same seed), so the methods differ only in how they
    spend compute; beyond those, a RandomSampler draws from the same space."""
    compute = 0
    finals: list[tuple[float, float]] = []

    def objective(trial: optuna.Trial) -> float:
        nonlocal compute
        hp = {
            "lr": trial.suggest_float("lr", 1e-4, 1e-1, log=True),
            "units": trial.suggest_int("units", 16, 256),
            "dropout": trial.suggest_float("dropout", 0.0, 0.5),
            "momentum": trial.suggest_float("momentum", 0.5, 0.99),
        }
        done = 0
        value = math.inf
        for step in RUNGS:
            if budget is not None and compute + step - done > budget:
                raise optuna.TrialPruned()  # out of budget: it does not finish
            compute += step - done
            done = step
            value = curves.loss(hp, step)
            if step == T:
                finals.append((value, final_loss(hp)))
                return value
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return value

    def out_of_budget(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if budget is not None and compute >= budget - RUNGS[0]:
            study.stop()

    study = optuna.create_study(
        study_name=f"bench-{seed}",  # Hyperband assigns brackets by a hash of the name
        direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=seed),
        pruner=pruner,
    )
    n_trials = max_trials if budget is None else None
    count = max_trials if max_trials is not None else (budget or 0) // RUNGS[0]
    for hp in draws(seed, count):  # more than can fit in the budget
        study.enqueue_trial(hp)
    study.optimize(objective, n_trials=n_trials, callbacks=[out_of_budget])
    best = min(finals) if finals else (math.inf, math.inf)
    ran = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    return Result(compute, best[1], len(ran))


# --- the run ------------------------------------------------------------------------------------


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(values: list[float]) -> list[int]:
        order = sorted(range(len(values)), key=values.__getitem__)
        out = [0] * len(values)
        for rank, i in enumerate(order):
            out[i] = rank
        return out

    n = len(xs)
    d2 = sum((a - b) ** 2 for a, b in zip(ranks(xs), ranks(ys), strict=True))
    return 1 - 6 * d2 / (n * (n * n - 1))


def stats(values: list[float]) -> str:
    return f"{statistics.fmean(values):8.4f} [{min(values):.4f}, {max(values):.4f}]"


def decision_time(max_trials: int, stop_once: bool) -> Result:
    config = epochal_config("adaptive_asha", max_trials, stop_once=stop_once)
    curves = Curves(0)
    return simulate(config, 0, curves.loss, varied_pace)


def model_based(seeds: int, n: int, pace: Callable[[Any], float],
                results: dict[str, list[Result]]) -> str:
    """Epochal's searchers with `sampler: tpe` (Optuna's TPE drawing each trial from the
    reports before it) next to the same searchers drawing at random, on the first `seeds`
    seeds; returns the summary's part."""
    sampler = {"name": "tpe"}
    configs = {
        "epochal optuna (tpe), every trial to T": epochal_config("optuna", n, sampler=sampler),
        "epochal adaptive_asha + tpe": epochal_config(
            "adaptive_asha", n, divisor=DIVISOR, max_rungs=len(RUNGS), sampler=sampler),
    }
    baseline = {"epochal optuna (tpe), every trial to T": "epochal random",
                "epochal adaptive_asha + tpe": "epochal adaptive_asha"}
    seeds = min(seeds, len(results["epochal random"]))
    print(f"model-based sampling, seeds 0-{seeds - 1} (against the same seeds' searches that "
          "draw at random):")
    regrets: dict[str, float] = {}
    computes: dict[str, float] = {}
    for name, config in configs.items():
        runs = [simulate(config, seed, Curves(seed).loss, pace) for seed in range(seeds)]
        base = results[baseline[name]][:seeds]
        regrets[name] = statistics.fmean(r.true_best - OPTIMUM for r in runs)
        print(
            f"  {name:42} compute {statistics.fmean(r.compute for r in runs):8.0f}, regret "
            f"{regrets[name]:.4f}; {baseline[name].removeprefix('epochal ')}: compute "
            f"{statistics.fmean(r.compute for r in base):8.0f}, regret "
            f"{statistics.fmean(r.true_best - OPTIMUM for r in base):.4f}"
        )
        computes[name] = statistics.fmean(r.compute for r in runs)
    # At equal compute: plain adaptive ASHA with max_trials raised to spend what ASHA + TPE did.
    base = results["epochal adaptive_asha"][:seeds]
    scale = computes["epochal adaptive_asha + tpe"] / statistics.fmean(r.compute for r in base)
    more = round(n * scale)
    equal = [simulate(epochal_config("adaptive_asha", more, divisor=DIVISOR, max_rungs=len(RUNGS)),
                      seed, Curves(seed).loss, pace) for seed in range(seeds)]
    equal_regret = statistics.fmean(r.true_best - OPTIMUM for r in equal)
    print(f"  {'epochal adaptive_asha, ' + str(more) + ' trials':42} compute "
          f"{statistics.fmean(r.compute for r in equal):8.0f}, regret {equal_regret:.4f} (ASHA + "
          "TPE's compute, drawing at random)")
    random_regret = statistics.fmean(
        r.true_best - OPTIMUM for r in results["epochal random"][:seeds])
    return (f"TPE regret {regrets['epochal optuna (tpe), every trial to T']:.4f} vs random "
            f"{random_regret:.4f}"
            f" at equal compute, adaptive ASHA + TPE {regrets['epochal adaptive_asha + tpe']:.4f} "
            f"vs adaptive ASHA {equal_regret:.4f} at equal compute")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--max-trials", type=int, default=256)
    parser.add_argument("--decision-trials", type=int, default=10_000)
    parser.add_argument(
        "--equal-speed",
        action="store_true",
        help="every trial trains at the same pace (then trials reach each rung in creation "
        "order, and ASHA's decisions equal those of a sequential search)",
    )
    parser.add_argument("--sampler-seeds", type=int, default=5,
                        help="seeds for the model-based (Optuna TPE) searchers, slower to run")
    add_smoke_option(parser, seeds=1, max_trials=16, decision_trials=200, sampler_seeds=1)
    args = parse_args(parser)
    pace = equal_pace if args.equal_speed else varied_pace
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n = args.max_trials
    started = time.perf_counter()

    configs = {
        "epochal random": epochal_config("random", n),
        "epochal asha (async_halving, 4 rungs)": epochal_config(
            "async_halving", n, num_rungs=len(RUNGS), divisor=DIVISOR
        ),
        "epochal asha (async_halving, 3 rungs)": epochal_config(
            "async_halving", n, num_rungs=len(RUNGS) - 1, divisor=DIVISOR
        ),
        f"epochal asha, 3x max_trials ({3 * n})": epochal_config(
            "async_halving", 3 * n, num_rungs=len(RUNGS), divisor=DIVISOR
        ),
        "epochal adaptive_asha": epochal_config(
            "adaptive_asha", n, divisor=DIVISOR, max_rungs=len(RUNGS)
        ),
        "epochal adaptive_asha stop_once=false": epochal_config(
            "adaptive_asha", n, divisor=DIVISOR, max_rungs=len(RUNGS), stop_once=False
        ),
    }
    results: dict[str, list[Result]] = {}
    for seed in range(args.seeds):
        curves = Curves(seed)
        for name, config in configs.items():
            results.setdefault(name, []).append(simulate(config, seed, curves.loss, pace))
            if name == "epochal random":
                # Control: full training of exactly the configurations the ASHA searchers
                # draw (Epochal's random searcher draws others, from the same space).
                finals = [(curves.loss(hp, T), final_loss(hp)) for hp in draws(seed, n)]
                results.setdefault("  same configs as ASHA, all to T (control)", []).append(
                    Result(n * T, min(finals)[1], n)
                )
        adaptive = results["epochal adaptive_asha"][-1]
        pruners: list[tuple[str, Callable[[], optuna.pruners.BasePruner], int | None]] = [
            (
                "optuna SuccessiveHalvingPruner",
                lambda: optuna.pruners.SuccessiveHalvingPruner(
                    min_resource=RUNGS[0], reduction_factor=DIVISOR
                ),
                None,
            ),
            (
                "optuna HyperbandPruner",
                lambda: optuna.pruners.HyperbandPruner(
                    min_resource=RUNGS[0], max_resource=T, reduction_factor=DIVISOR
                ),
                None,
            ),
            (
                "optuna HyperbandPruner, adaptive's compute",
                lambda: optuna.pruners.HyperbandPruner(
                    min_resource=RUNGS[0], max_resource=T, reduction_factor=DIVISOR
                ),
                adaptive.compute,
            ),
        ]
        for name, pruner_factory, budget in pruners:
            results.setdefault(name, []).append(
                optuna_search(pruner_factory(), seed, curves, n if budget is None else None, budget)
            )

    print(
        f"Synthetic learning curves, T={T}, optimum f*={OPTIMUM}, max_trials={n}, "
        f"{WORKERS} workers (Epochal), divisor {DIVISOR}, {args.seeds} seeds; "
        "compute in length units (batches), mean [min, max] over seeds"
    )
    sample, curves = draws(0, 2000), Curves(0)
    truth = [final_loss(hp) for hp in sample]
    print(
        "how informative early losses are, Spearman rank correlation with f(x) over 2000 "
        "configurations: "
        + ", ".join(
            f"t={t}: {spearman([curves.loss(hp, t) for hp in sample], truth):.2f}" for t in RUNGS
        )
    )
    print(
        f"{'method':44} {'compute':>9} {'vs random':>9} {'trials':>7}  "
        f"{'best true f(x)':>24}  {'regret':>24}"
    )
    random_compute = statistics.fmean(r.compute for r in results["epochal random"])
    for name, rs in results.items():
        compute = statistics.fmean(r.compute for r in rs)
        print(
            f"{name:44} {compute:9.0f} {compute / random_compute:9.3f} "
            f"{statistics.fmean(r.trials for r in rs):7.1f}  "
            f"{stats([r.true_best for r in rs]):>24}  "
            f"{stats([r.true_best - OPTIMUM for r in rs]):>24}"
        )

    rnd = results["epochal random"]
    random_best = statistics.fmean(r.true_best for r in rnd)
    goal_one = (
        "epochal asha (async_halving, 4 rungs)",
        "epochal asha (async_halving, 3 rungs)",
        f"epochal asha, 3x max_trials ({3 * n})",
    )
    for name in goal_one:
        rows = results[name]
        within = sum(a.true_best <= 1.01 * r.true_best for a, r in zip(rows, rnd, strict=True))
        ratio = [a.compute / r.compute for a, r in zip(rows, rnd, strict=True)]
        gap = statistics.fmean(r.true_best for r in rows) / random_best - 1
        met = gap <= 0.01 and max(ratio) <= 1 / 3
        print(
            f"goal 1 ({name.removeprefix('epochal ')}): within 1% of random's best at <= 1/3 "
            f"of its compute: mean best f {gap:+.1%} vs random's, within 1% in {within}/"
            f"{len(rows)} seeds; compute {stats(ratio).strip()} of random's -> "
            f"{'MET' if met else 'NOT MET'} (on the mean over seeds)"
        )
    ada = results["epochal adaptive_asha"]
    hb = results["optuna HyperbandPruner, adaptive's compute"]
    wins = sum(a.true_best < h.true_best for a, h in zip(ada, hb, strict=True))
    ties = sum(a.true_best == h.true_best for a, h in zip(ada, hb, strict=True))
    ada_regret = statistics.fmean(r.true_best - OPTIMUM for r in ada)
    hb_regret = statistics.fmean(r.true_best - OPTIMUM for r in hb)
    print(
        "goal 2, adaptive ASHA at least as good as Optuna's Hyperband at equal compute "
        "(Hyperband given the adaptive search's compute per seed as its budget): mean regret "
        f"{ada_regret:.4f} vs {hb_regret:.4f}; per seed adaptive better {wins}, same trial "
        f"{ties}, worse {len(ada) - wins - ties} -> "
        f"{'MET' if ada_regret <= hb_regret else 'NOT MET'}"
    )
    hb_n = results["optuna HyperbandPruner"]
    hb_ratio = statistics.fmean(r.compute for r in hb_n) / statistics.fmean(r.compute for r in ada)
    print(
        "  (at equal max_trials instead: Hyperband used "
        f"{hb_ratio:.2f}"
        f"x the adaptive search's compute for mean regret "
        f"{statistics.fmean(r.true_best - OPTIMUM for r in hb_n):.4f})"
    )

    sampled = model_based(args.sampler_seeds, n, pace, results)

    timings = {so: decision_time(args.decision_trials, so) for so in (True, False)}
    for so, r in timings.items():
        print(
            f"decision time, {args.decision_trials}-trial adaptive_asha (stop_once={so}): "
            f"{r.events} searcher calls, {r.decision_seconds:.2f} s inside the searcher, "
            f"{r.decision_seconds / r.events * 1e6:.1f} us/event"
        )
    elapsed = time.perf_counter() - started
    asha = results["epochal asha (async_halving, 4 rungs)"]
    asha_ratio = [a.compute / r.compute for a, r in zip(asha, rnd, strict=True)]
    default = timings[True]
    print(
        f"summary: ASHA regret {statistics.fmean(a.true_best - OPTIMUM for a in asha):.4f} at "
        f"{statistics.fmean(asha_ratio):.3f}x random's compute (random regret "
        f"{statistics.fmean(r.true_best - OPTIMUM for r in rnd):.4f}); adaptive ASHA regret "
        f"{ada_regret:.4f} vs Optuna Hyperband {hb_regret:.4f} at equal compute "
        f"({statistics.fmean(r.compute for r in ada):.0f} batches); searcher "
        f"{default.decision_seconds / default.events * 1e6:.0f} us/event at "
        f"{args.decision_trials} trials; {sampled}; run {elapsed:.0f} s"
    )


if __name__ == "__main__":
    main()
