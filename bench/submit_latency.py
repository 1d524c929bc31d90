"""How long from `experiment create` to the first training metric stored, and to completion.

Starts a local cluster (process runtime) in a temporary state dir on free ports, or uses a running
master given with --master, then submits the digits example as a one-trial experiment several
times (after one untimed run, --warm-ups). For each run it measures, from the moment the create
request is sent:
  - first metric: until the API shows the trial's first training metric (polled every 10 ms);
  - completion:   until the API shows the experiment COMPLETED.
Prints each run, then the medians; the last line is the one-line summary.

    .venv/bin/python bench/submit_latency.py [--runs 5] [--batches 100] [--warm-ups 1]
        [--master URL] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.login import admin_headers, cli_headers  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from cli.model_dir import package  # noqa: E402

DIGITS = REPO / "examples" / "digits"
POLL = 0.01


def one_trial_config(batches: int, run: int) -> str:
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["name"] = f"latency-{run}"
    config["searcher"]["max_length"] = {"batches": batches}
    return yaml.safe_dump(config)


def measure(
    api: httpx.Client, files: list[dict[str, object]], batches: int, run: int
) -> tuple[float, float]:
    body = {"config": one_trial_config(batches, run), "modelDefinition": files}
    start = time.perf_counter()
    response = api.post("/api/v1/experiments", json=body)
    response.raise_for_status()
    experiment_id = response.json()["experiment"]["id"]
    first_metric = None
    while True:
        if first_metric is None:
            trials = api.get(f"/api/v1/experiments/{experiment_id}/trials").json()["trials"]
            if trials:
                metrics = api.get(
                    f"/api/v1/trials/{trials[0]['id']}/metrics", params={"group": "training"}
                ).json()["metrics"]
                if metrics:
                    first_metric = time.perf_counter() - start
        state = api.get(f"/api/v1/experiments/{experiment_id}").json()["experiment"]["state"]
        if state in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"):
            if state != "STATE_COMPLETED" or first_metric is None:
                raise SystemExit(f"experiment {experiment_id} ended {state} without metrics")
            return first_metric, time.perf_counter() - start
        time.sleep(POLL)


def run(master: str, headers: dict[str, str], runs: int, batches: int,
        warm_ups: int = 1) -> None:
    files = package(DIGITS)
    firsts, completions = [], []
    with httpx.Client(base_url=master, timeout=60, headers=headers) as api:
        for i in range(warm_ups):  # warm-up: caches, connections, imports on disk
            measure(api, files, batches, -i)
        for i in range(1, runs + 1):
            first, done = measure(api, files, batches, i)
            firsts.append(first)
            completions.append(done)
            print(f"run {i}: first metric {first:.2f} s, completion {done:.2f} s")
    print(
        f"first metric: {statistics.median(firsts):.2f} s, "
        f"completion: {statistics.median(completions):.2f} s (median of {runs}, "
        f"one trial of {batches} batches, process runtime)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--master", help="use this running master instead of a new cluster")
    parser.add_argument("--warm-ups", type=int, default=1,
                        help="untimed runs before the timed ones")
    # 10 batches: the digits example's first training report comes at batch 10.
    add_smoke_option(parser, runs=1, batches=10, warm_ups=0)
    args = parse_args(parser)
    if args.master:
        run(args.master, cli_headers(args.master), args.runs, args.batches, args.warm_ups)
        return
    with bench_cluster(agent_slots=1) as (_, info):
        run(info.api_url, admin_headers(info.api_url, info.admin_password), args.runs,
            args.batches, args.warm_ups)


if __name__ == "__main__":
    main()
