"""A large random search on the embedded cluster: trials that report one metric and exit.

Starts a local cluster (process runtime, `--slots` slots) in a temporary state dir, submits a
random search of `--trials` trials (each sleeps `--trial-seconds`, reports its validation loss
and exits; `max_concurrent_trials` is `--concurrent`, by default the slots, and more lets the
next trials wait in the pool's queue) and waits for it to complete. Measured:
  - trials/s over the whole search (from the create request to COMPLETED);
  - overhead per trial: slot time beyond the trial's own (wall x slots - trials x trial time,
    divided by trials), which includes starting each trial's Python;
  - the platform's CPU per trial: user+system seconds of the master, Temporal, PostgreSQL (all
    its backends) and the agent process (not the trials), from psutil, before and after;
  - the CPU of the trials' own processes per trial (sandbox, Python, harness, script), which
    the overhead includes and the platform's CPU does not;
  - the largest workflow history (events) among the experiment's, the trials' and the pool's;
  - reads of the finished experiment, p50/p99 of `--requests` each: its detail, a page of 100
    trials (by id and by best validation, at random offsets), and `epochal experiment describe`
    (the CLI in a subprocess: wall time, best of --describes 3).
The last line is the one-line summary.

    .venv/bin/python bench/scale.py [--trials 10000] [--slots 8] [--concurrent 16]
        [--trial-seconds 0] [--requests 200] [--read-warm-ups N] [--describes 3] [--poll 1]
        [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.login import admin_headers  # noqa: E402
from bench.common.reads import ReadPath, time_reads  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from cli.model_dir import package  # noqa: E402
from common.processes import read_pid  # noqa: E402
from deploy import local_cluster  # noqa: E402

TRAIN = '''\
import time

import harness.core

with harness.core.init() as core:
    time.sleep(float(core.info.hparams["seconds"]))
    x = float(core.info.hparams["x"])
    core.train.report_validation_metrics(1, {"loss": (x - 0.3) ** 2})
'''
PARTS = ("master", "temporal", "postgres", "agent")


def config(trials: int, concurrent: int, seconds: float) -> str:
    return yaml.safe_dump({
        "name": f"scale-{trials}", "entrypoint": "python3 train.py",
        "hyperparameters": {"seconds": seconds,
                            "x": {"type": "double", "minval": 0.0, "maxval": 1.0}},
        "searcher": {"name": "random", "metric": "loss", "max_trials": trials,
                     "max_length": {"batches": 1}, "max_concurrent_trials": concurrent},
        "max_restarts": 0,
    })


def platform_processes(settings: local_cluster.ClusterSettings) -> dict[str, list[psutil.Process]]:
    """Each part's processes now (PostgreSQL's backends come and go: list them again later)."""
    found: dict[str, list[psutil.Process]] = {}
    for part in PARTS:
        pid = read_pid(settings.pid_file(part))
        if pid is None:
            continue
        proc = psutil.Process(pid)
        found[part] = [proc]
        if part == "postgres":  # its backends, checkpointer, walwriter, ...
            found[part].extend(proc.children(recursive=True))
    return found


def cpu_seconds(parts: dict[str, list[psutil.Process]]) -> dict[tuple[str, int], float]:
    """User+system seconds of each (part, pid) still running."""
    used = {}
    for part, procs in parts.items():
        for proc in procs:
            try:
                t = proc.cpu_times()
                used[(part, proc.pid)] = t.user + t.system
            except psutil.Error:
                pass
    return used


def trial_cpu_seconds(parts: dict[str, list[psutil.Process]]) -> float:
    """User+system seconds of the agent's ended children: the trials' processes (the sandbox's
    init, the trial's Python with its harness, the script), counted once each is reaped."""
    agent = parts.get("agent", [])
    if not agent:
        return 0.0
    t = agent[0].cpu_times()
    return t.children_user + t.children_system


def cpu_by_part(before: dict[tuple[str, int], float],
                after: dict[tuple[str, int], float]) -> dict[str, float]:
    """Core-seconds each part spent between the two readings (a process started in between
    counts from zero; one that ended in between is lost)."""
    spent = {part: 0.0 for part in PARTS}
    for (part, pid), used in after.items():
        spent[part] += used - before.get((part, pid), 0.0)
    return spent


async def largest_history(address: str) -> int:
    from temporalio.client import Client

    client = await Client.connect(address)
    largest = 0
    async for execution in client.list_workflows():
        largest = max(largest, execution.history_length or 0)
    return largest


def measure_reads(api: httpx.Client, experiment_id: int, trials: int, requests: int,
                  warm_ups: int | None = None) -> dict[str, float]:
    """p99 (ms) of each read a user makes of the experiment."""
    rng = random.Random(7)

    def offset() -> int:
        return 100 * rng.randrange(max(1, trials // 100))

    cases: dict[str, ReadPath] = {
        "experiment detail": lambda: (f"/api/v1/experiments/{experiment_id}", {}),
        "trials page (100 by id)": lambda: (
            f"/api/v1/experiments/{experiment_id}/trials", {"limit": 100, "offset": offset()}),
        "trials page (100 by metric)": lambda: (
            f"/api/v1/experiments/{experiment_id}/trials",
            {"limit": 100, "offset": offset(), "sortBy": "SORT_BY_BEST_VALIDATION_METRIC"}),
    }
    return {name: time_reads(api, name, path, requests, warm_ups)[1]
            for name, path in cases.items()}


def time_describe(api_url: str, token: str, experiment_id: int,
                  tries: int = 3) -> tuple[float, int]:
    """Best of `tries` wall times (s) of `epochal experiment describe`, and its output's
    lines."""
    env = {**os.environ, "EPOCHAL_MASTER": api_url, "EPOCHAL_TOKEN": token}
    best, lines = float("inf"), 0
    for _ in range(tries):
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "cli.main", "experiment", "describe", str(experiment_id)],
            env=env, cwd=REPO, capture_output=True, text=True, check=True)
        best = min(best, time.perf_counter() - began)
        lines = len(done.stdout.splitlines())
    print(f"experiment describe              {best:.2f} s, {lines} lines", flush=True)
    return best, lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=10_000)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--trial-seconds", type=float, default=0.0)
    p.add_argument("--concurrent", type=int, default=0,
                   help="the search's max_concurrent_trials (default: --slots)")
    p.add_argument("--timeout", type=float, default=6 * 3600)
    p.add_argument("--requests", type=int, default=200, help="requests per read")
    p.add_argument("--read-warm-ups", type=int, default=None,
                   help="untimed requests per read first (default: a tenth of --requests, 10 "
                        "at least)")
    p.add_argument("--describes", type=int, default=3,
                   help="`experiment describe` is timed as the best of this many")
    p.add_argument("--poll", type=float, default=1.0,
                   help="seconds between looks at whether the search has ended")
    # 2 trials on 1 slot: the searcher starts the second once the first has ended.
    add_smoke_option(p, trials=2, slots=1, requests=1, read_warm_ups=0, describes=1, poll=0.1)
    args = parse_args(p)

    with tempfile.TemporaryDirectory(prefix="epochal-scale-model-") as model, \
            bench_cluster(agent_slots=args.slots) as (settings, info):
        Path(model).chmod(0o755)
        (Path(model) / "train.py").write_text(TRAIN)
        headers = admin_headers(info.api_url, info.admin_password)
        api = httpx.Client(base_url=info.api_url, headers=headers, timeout=120)
        parts = platform_processes(settings)
        before, trials_before = cpu_seconds(parts), trial_cpu_seconds(parts)
        started = time.perf_counter()
        answer = api.post("/api/v1/experiments", json={
            "config": config(args.trials, args.concurrent or args.slots, args.trial_seconds),
            "modelDefinition": package(Path(model))})
        answer.raise_for_status()
        experiment_id = answer.json()["experiment"]["id"]
        state = ""
        last_note = started
        while time.perf_counter() - started < args.timeout:
            experiment = api.get(f"/api/v1/experiments/{experiment_id}").json()["experiment"]
            state = experiment["state"]
            if state in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"):
                break
            if time.perf_counter() - last_note > 60:
                last_note = time.perf_counter()
                print(f"  {last_note - started:.0f} s: {experiment.get('numTrials', '?')} "
                      "trials so far", flush=True)
            time.sleep(args.poll)
        wall = time.perf_counter() - started
        parts = platform_processes(settings)  # PostgreSQL's backends changed meanwhile
        after, trials_cpu = cpu_seconds(parts), trial_cpu_seconds(parts) - trials_before
        if state != "STATE_COMPLETED":
            raise SystemExit(f"the search ended {state or 'not at all'} after {wall:.0f} s")
        spent = cpu_by_part(before, after)
        cpu = sum(spent.values())
        history = asyncio.run(largest_history(info.temporal_address))
        reads = measure_reads(api, experiment_id, args.trials, args.requests,
                              args.read_warm_ups)
        describe_seconds, describe_lines = time_describe(
            info.api_url, headers["Authorization"].removeprefix("Bearer "), experiment_id,
            args.describes)

    n = args.trials
    rate = n / wall
    overhead = (wall * args.slots - n * args.trial_seconds) / n
    per_trial_cpu = cpu / n
    print(f"trials:                {n} on {args.slots} slots, {args.trial_seconds:g} s each")
    print(f"wall time:             {wall:.1f} s")
    print(f"platform CPU:          {cpu:.1f} core-s (" + ", ".join(
        f"{part} {used / n:.3f}" for part, used in spent.items()) + " core-s per trial)")
    print(f"trial processes' CPU:  {trials_cpu / n:.3f} core-s per trial (part of the overhead, "
          "not of the platform's CPU)")
    print(f"largest history:       {history} events")
    worst_name, worst = max(reads.items(), key=lambda item: item[1])
    print(f"scale: {rate:.2f} trials/s, overhead {overhead:.2f} slot-s per trial, platform CPU "
          f"{per_trial_cpu:.3f} core-s per trial, largest history {history} events, reads p99 "
          f"<= {worst:.0f} ms ({worst_name}), describe {describe_seconds:.2f} s in "
          f"{describe_lines} lines ({n} trials, {args.slots} slots)")


if __name__ == "__main__":
    main()
