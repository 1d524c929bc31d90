"""Trial start-up: from "trial allocated" to its first training metric, Docker vs process runtime.

"Allocated" is the moment the `run_trial` activity starts on the agent: the activity's
`last_started_time` as the Temporal server recorded it (read from the trial workflow's
description, polled every 20 ms). The first training metric is the `reportTime` the master gave
the trial's first stored training metric (PostgreSQL's now() at insert). Both clocks are this
machine's. The span covers what the agent does (model definition, trial info, starting the
container or process), the interpreter and imports (numpy, scikit-learn, the harness), the
digits data, the first 10 batches, and the harness's metric batching.

Starts a local cluster (own PostgreSQL and Temporal in a temporary state dir, free ports, one
slot), then for each runtime restarts the local agent with it and submits the digits example as a
one-trial experiment of --batches 20 several times (after one warm-up run, --warm-ups). The
Docker runtime needs an engine and the task image (`epochal image build`; a local image, nothing
is pulled).

    .venv/bin/python bench/container_start.py [--runs 5] [--warm-ups 1] [--batches 20] \
        [--runtimes docker,process,process-root] [--smoke]

Prints each run, then the medians; the last line is the one-line summary.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from temporalio.client import Client  # noqa: E402

from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.login import admin_headers  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from cli.model_dir import package  # noqa: E402
from common import processes  # noqa: E402
from common.temporal_names import trial_workflow_id  # noqa: E402
from deploy import local_cluster  # noqa: E402

DIGITS = REPO / "examples" / "digits"
POLL = 0.02


def one_trial_config(run: str, batches: int) -> str:
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["name"] = f"container-start-{run}"
    config["searcher"]["max_length"] = {"batches": batches}
    return yaml.safe_dump(config)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def measure(api: httpx.AsyncClient, temporal: Client, files: list[dict[str, object]],
                  run: str, batches: int) -> float:
    """Seconds from the run_trial activity's start to the first training metric stored."""
    body = {"config": one_trial_config(run, batches), "modelDefinition": files}
    response = await api.post("/api/v1/experiments", json=body)
    response.raise_for_status()
    experiment_id = response.json()["experiment"]["id"]
    started: datetime | None = None
    first: datetime | None = None
    deadline = time.monotonic() + 300
    trial_id = None
    while time.monotonic() < deadline:
        if trial_id is None:
            trials = (await api.get(f"/api/v1/experiments/{experiment_id}/trials")).json()
            if trials["trials"]:
                trial_id = trials["trials"][0]["id"]
        if trial_id is not None and started is None:
            handle = temporal.get_workflow_handle(trial_workflow_id(experiment_id, trial_id))
            try:
                desc = await handle.describe()
            except Exception:  # not started yet
                desc = None
            for pending in desc.raw_description.pending_activities if desc else []:
                if (pending.activity_type.name == "run_trial"
                        and pending.HasField("last_started_time")):
                    started = pending.last_started_time.ToDatetime().astimezone()
        if trial_id is not None and first is None:
            metrics = (await api.get(f"/api/v1/trials/{trial_id}/metrics",
                                     params={"group": "training"})).json()["metrics"]
            if metrics:
                first = min(_time(m["reportTime"]) for m in metrics)
        if started is not None and first is not None:
            break
        state = (await api.get(f"/api/v1/experiments/{experiment_id}")).json()
        if state["experiment"]["state"] in ("STATE_ERROR", "STATE_CANCELED"):
            raise SystemExit(f"experiment {experiment_id} ended {state['experiment']['state']}")
        await asyncio.sleep(POLL)
    if started is None or first is None:
        raise SystemExit(f"experiment {experiment_id}: no start ({started}) or metric ({first})")
    # Let it finish, so the next run has the slot.
    while (await api.get(f"/api/v1/experiments/{experiment_id}")).json()["experiment"][
            "state"] not in ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"):
        await asyncio.sleep(0.1)
    return (first - started).total_seconds()


# What each runtime named on the command line is: (--runtime, --task-user). `process` is what
# `cluster up` runs (sandboxed as `nobody` when root); `process-root` the same, unsandboxed.
RUNTIMES = {"docker": ("docker", None), "process": ("process", None),
            "process-root": ("process", "root")}


def restart_agent(settings: local_cluster.ClusterSettings, runtime: str) -> None:
    processes.stop_pid_file(settings.pid_file("agent"), settings.stop_grace)
    settings.agent_runtime, settings.agent_task_user = RUNTIMES[runtime]
    local_cluster.up(settings, parts=["agent"])


async def run_bench(settings: local_cluster.ClusterSettings, info: local_cluster.ClusterInfo,
                    runtimes: list[str], runs: int, warm_ups: int,
                    batches: int) -> dict[str, float]:
    files = package(DIGITS)
    temporal = await Client.connect(info.temporal_address)
    medians = {}
    headers = admin_headers(info.api_url, info.admin_password)
    async with httpx.AsyncClient(base_url=info.api_url, timeout=60, headers=headers) as api:
        for runtime in runtimes:
            await asyncio.to_thread(restart_agent, settings, runtime)
            for i in range(1, warm_ups + 1):
                await measure(api, temporal, files, f"{runtime}-warm-up-{i}", batches)
            spans = []
            for i in range(1, runs + 1):
                span = await measure(api, temporal, files, f"{runtime}-{i}", batches)
                spans.append(span)
                print(f"{runtime} run {i}: allocated -> first training metric {span:.2f} s",
                      flush=True)
            medians[runtime] = statistics.median(spans)
            print(f"{runtime}: median {medians[runtime]:.2f} s, min {min(spans):.2f} s, "
                  f"max {max(spans):.2f} s", flush=True)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--runtimes", default="docker,process",
                        help="comma-separated runtimes to measure, of "
                             f"{', '.join(RUNTIMES)} (default: %(default)s)")
    parser.add_argument("--warm-ups", type=int, default=1,
                        help="untimed runs per runtime before its timed ones")
    parser.add_argument("--batches", type=int, default=20,
                        help="each trial's length (the first training metric comes at 10)")
    add_smoke_option(parser, runs=1, warm_ups=0, batches=10)
    args = parse_args(parser)
    runtimes = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    unknown = [r for r in runtimes if r not in RUNTIMES]
    if unknown:
        parser.error(f"unknown runtimes {unknown}; choose from {', '.join(RUNTIMES)}")
    if "docker" in runtimes:
        import docker

        from task_image.image import image_exists, task_image_tag

        tag = task_image_tag()
        if not image_exists(docker.from_env(), tag):
            raise SystemExit(f"the task image {tag} is not built; run `epochal image build`")
    with bench_cluster(agent_slots=1, agent_runtime=RUNTIMES[runtimes[0]][0]) as (settings,
                                                                                  info):
        medians = asyncio.run(run_bench(settings, info, runtimes, args.runs,
                                         args.warm_ups, args.batches))
    summary = ", ".join(f"{r} {m:.2f} s" for r, m in medians.items())
    print(f"trial allocated -> first training metric (median of {args.runs}, local image, "
          f"digits, 1 slot): {summary}")


if __name__ == "__main__":
    main()
