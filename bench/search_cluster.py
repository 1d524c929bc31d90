"""What a search spends on a real cluster against what its searcher decided.

The synthetic learning curves of `bench/search_efficiency.py` (the same f(x), curve shapes and
noise) are trained by real trials on the embedded local cluster: each trial steps once per
`--step-seconds`, reports its validation loss every `--every` steps, checks `should_preempt()`
after every step, and stops when asked (Core API style). Epochal's searcher (adaptive ASHA by
default) decides, through the experiment workflow, which trials stop at which rung.

Measured, per seed:
  - the compute the cluster spent: the steps every trial trained (`steps_completed`);
  - for each trial stopped early, the steps it trained past the rung length at which it was
    stopped (the rung lengths are max_length / divisor^k; a trial is counted at the longest
    rung length it reached, which is exact while overruns stay below the next rung's gap);
  - the compute the searcher decided: what the cluster spent less those overruns (its own
    decisions, taking effect at the validations that caused them), and, for reference, the same
    search (config and seed) in the discrete-event simulation of `bench/search_efficiency.py`
    (every trial there starts at once and trains at one pace, so trials reach their rungs in
    another order than on the cluster, where each start takes a fraction of a second: the
    searcher decides otherwise, and that ratio varies by +-15% from run to run);
  - the best trial's true f(x) (regret against the optimum) in both;
  - Optuna's HyperbandPruner on the same curves and configurations (`search_efficiency`'s
    sequential Optuna run): its compute and regret for as many trials, and its regret when it
    gets the cluster's compute.
Goals: the cluster's compute within 10% of the decided compute; adaptive ASHA's compute at most
Hyperband's at a regret no worse.

    .venv/bin/python bench/search_cluster.py [--seeds 3] [--trials 64] [--slots 4] [--poll 1] \
        [--smoke]

The last line is the one-line summary.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import search_efficiency as curves_bench  # noqa: E402
from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.login import admin_headers  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from cli.model_dir import package  # noqa: E402
from common.expconf import validate_experiment_config  # noqa: E402
from workflows.searchers import asha  # noqa: E402
from workflows.searchers.asha import capped_max_rungs  # noqa: E402

TRAIN = '''\
"""One synthetic learning curve (curves.py), trained step by step on the cluster."""
import time

import harness.core

from curves import Curves

with harness.core.init() as core:
    hp = core.info.hparams
    curves = Curves(int(hp["curve_seed"]))
    step = core.info.steps_completed
    end = core.info.max_length
    while step < end:
        time.sleep(float(hp["step_seconds"]))
        step += 1
        if step % int(hp["every"]) == 0 or step == end:
            core.train.report_validation_metrics(step, {"loss": curves.loss(hp, step)})
        if core.preempt.should_preempt():
            break
    core.train.report_training_metrics(step, {"steps": step})
'''


def curves_module() -> str:
    """curves.py for the trials: the benchmark's own curve code, so both sides train alike."""
    parts = [
        "import math\nimport random\n",
        f"T = {curves_bench.T}\nOPTIMUM = {curves_bench.OPTIMUM}\nNOISE = {curves_bench.NOISE}\n",
        inspect.getsource(curves_bench.final_loss),
        inspect.getsource(curves_bench._key),
        inspect.getsource(curves_bench.Curves),
    ]
    return "\n\n".join(parts).replace("Mapping[str, Any]", "dict").replace(
        "tuple[float, int, float, float]", "tuple").replace(
        "dict[tuple, tuple[float, float, float]]", "dict")


def search_config(name: str, trials: int, slots: int, seed: int, step_seconds: float,
                  every: int) -> dict[str, Any]:
    config = curves_bench.epochal_config(name, trials, max_concurrent_trials=slots)
    config["hyperparameters"] = {
        **curves_bench.HPARAMS,
        "curve_seed": seed, "step_seconds": step_seconds, "every": every,
    }
    config.update({
        "name": f"search-cluster-{name}-{seed}", "max_restarts": 0,
        "reproducibility": {"experiment_seed": seed},
    })
    return config


def rung_lengths(config: dict[str, Any]) -> list[int]:
    """Every length a rung of the search can need: those of its bracket with the most rungs
    (a bracket of fewer rungs has the last of them)."""
    searcher = config["searcher"]
    top = int(searcher["max_length"]["batches"])
    divisor = float(searcher["divisor"])
    rungs = searcher.get("num_rungs") or capped_max_rungs(
        int(searcher["max_rungs"]), top, int(searcher["max_trials"]), divisor)
    return asha.rung_lengths(rungs, divisor, top)


def run_search(api: httpx.Client, model: Path, config: dict[str, Any],
               timeout: float, poll: float = 1.0) -> list[dict[str, Any]]:
    answer = api.post("/api/v1/experiments", json={
        "config": yaml.safe_dump(config), "modelDefinition": package(model)})
    answer.raise_for_status()
    experiment_id = answer.json()["experiment"]["id"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = api.get(f"/api/v1/experiments/{experiment_id}").json()["experiment"]["state"]
        if state in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"):
            break
        time.sleep(poll)
    else:
        raise SystemExit(f"experiment {experiment_id} did not end within {timeout:.0f} s")
    if state != "STATE_COMPLETED":
        raise SystemExit(f"experiment {experiment_id} ended {state}")
    trials: list[dict[str, Any]] = api.get(
        f"/api/v1/experiments/{experiment_id}/trials").json()["trials"]
    return trials


def measure(trials: list[dict[str, Any]], config: dict[str, Any]) -> dict[str, Any]:
    top = int(config["searcher"]["max_length"]["batches"])
    lengths = rung_lengths(config)
    # The trials' own curves: what a trial trained to the end reported there.
    curves = curves_bench.Curves(int(config["hyperparameters"]["curve_seed"]))
    spent = sum(int(t["totalBatchesProcessed"]) for t in trials)
    overruns = []
    best = (float("inf"), float("inf"))
    for trial in trials:
        trained = int(trial["totalBatchesProcessed"])
        if trained < top:
            reached = max((n for n in lengths if n <= trained), default=0)
            overruns.append(trained - reached)
        else:
            hp = trial["hparams"]
            best = min(best, (curves.loss(hp, top), curves_bench.final_loss(hp)))
    return {"compute": spent, "overruns": overruns, "true_best": best[1]}


def hyperband_pruner() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.pruners.HyperbandPruner(min_resource=curves_bench.RUNGS[0],
                                          max_resource=curves_bench.T,
                                          reduction_factor=curves_bench.DIVISOR)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--searcher", default="adaptive_asha")
    p.add_argument("--step-seconds", type=float, default=0.02)
    p.add_argument("--every", type=int, default=4, help="steps between validations")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--poll", type=float, default=1.0,
                   help="seconds between looks at whether the search has ended")
    add_smoke_option(p, seeds=1, trials=4, slots=2, step_seconds=0.001, poll=0.1)
    args = parse_args(p)

    rows = []
    with tempfile.TemporaryDirectory(prefix="epochal-search-cluster-") as model_dir, \
            bench_cluster(agent_slots=args.slots) as (_, info):
        model = Path(model_dir)
        model.chmod(0o755)
        (model / "train.py").write_text(TRAIN)
        (model / "curves.py").write_text(curves_module())
        api = httpx.Client(base_url=info.api_url,
                           headers=admin_headers(info.api_url, info.admin_password), timeout=60)
        for seed in range(args.seeds):
            config = search_config(args.searcher, args.trials, args.slots, seed,
                                   args.step_seconds, args.every)
            began = time.perf_counter()
            trials = run_search(api, model, config, args.timeout, args.poll)
            wall = time.perf_counter() - began
            cluster = measure(trials, config)
            decided = curves_bench.simulate(
                validate_experiment_config(config).model_dump(mode="json"), seed,
                curves_bench.Curves(seed).loss, curves_bench.equal_pace)
            own = cluster["compute"] - sum(cluster["overruns"])
            ratio = cluster["compute"] / own
            simulated = cluster["compute"] / decided.compute
            over = cluster["overruns"] or [0]
            hyperband = curves_bench.optuna_search(
                hyperband_pruner(), seed, curves_bench.Curves(seed), args.trials)
            at_ours = curves_bench.optuna_search(
                hyperband_pruner(), seed, curves_bench.Curves(seed), None, cluster["compute"])
            regret = cluster["true_best"] - curves_bench.OPTIMUM
            rows.append((ratio, statistics.median(over), max(over), cluster["compute"],
                         regret, hyperband.compute, hyperband.true_best - curves_bench.OPTIMUM,
                         at_ours.true_best - curves_bench.OPTIMUM))
            print(f"seed {seed}: {len(trials)} trials in {wall:.0f} s; compute: cluster "
                  f"{cluster['compute']} steps, decided {own} ({ratio:.2f}x), simulated "
                  f"{decided.compute} ({simulated:.2f}x); stopped trials overran their rung by "
                  f"median {statistics.median(over):g}, max {max(over)} steps "
                  f"({len(cluster['overruns'])} stopped); regret: "
                  f"cluster {cluster['true_best'] - curves_bench.OPTIMUM:.3f}, simulated "
                  f"{decided.true_best - curves_bench.OPTIMUM:.3f}; Optuna Hyperband "
                  f"({args.trials} trials): {hyperband.compute} steps, regret "
                  f"{rows[-1][6]:.3f}; at the cluster's compute: regret {rows[-1][7]:.3f}",
                  flush=True)

    ratios = [r[0] for r in rows]
    mean = statistics.fmean
    print(f"{args.searcher} on the cluster: compute {mean(r[3] for r in rows):.0f} steps, regret "
          f"{mean(r[4] for r in rows):.3f}; Optuna Hyperband: compute "
          f"{mean(r[5] for r in rows):.0f} steps, regret {mean(r[6] for r in rows):.3f}, and "
          f"at the cluster's compute regret {mean(r[7] for r in rows):.3f} (mean over seeds; "
          "goal: compute <= Hyperband's at a regret no worse)")
    print(f"search_cluster: cluster compute {statistics.mean(ratios):.2f}x the decided compute "
          f"(range {min(ratios):.2f}-{max(ratios):.2f}, goal <= 1.10), stopped trials overran "
          f"their rung by median {statistics.median(r[1] for r in rows):g} steps (max "
          f"{max(r[2] for r in rows)}), {args.searcher}, {args.trials} trials x {args.seeds} "
          f"seeds on {args.slots} slots, validation every {args.every} steps")


if __name__ == "__main__":
    main()
