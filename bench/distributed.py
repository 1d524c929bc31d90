"""Distributed trials: start-up and DDP throughput of the torch digits example at 1, 2, 4 ranks.

Starts a local cluster (own PostgreSQL and Temporal in a temporary state dir, free ports) whose
agent has 2 slots (--agent-slots), plus a second agent of as many, so 4 ranks span both agents.
For each rank count it submits examples/torch_digits (Epochal's torchrun launcher,
`slots_per_trial: N`) and reads:

- start-up: from "all slots granted" (in the trial workflow's history: the `slots_granted`
  signal as the Temporal server stamped it, or the `request_slots` answer's completion time)
  to "every rank in the first step" (the latest of the ranks' "finished its first batch" log
  lines, stamped by their agents when read); and the
  platform's share of it, up to "every agent's part started" (the latest `last_started_time`
  of the trial's `run_trial` activities, polled every 20 ms): the rest is Python, torchrun and
  torch starting, which on this machine's 2 cores is most of it;
- throughput: the chief's "trained batches ... in S s" line: batches/s and samples/s over all
  ranks (the global batch is batch_size x ranks).

torch (CPU) comes from the `torch` extra (make test installs it).

    .venv/bin/python bench/distributed.py [--ranks 1,2,4] [--batches 300] [--runs 3] \
        [--warm-ups 1] [--agent-slots 2] [--smoke]

Prints each run, then the medians; the last line is the one-line summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from temporalio.api.common.v1 import Payload, Payloads  # noqa: E402
from temporalio.client import Client  # noqa: E402

from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.login import admin_headers  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from cli.model_dir import package  # noqa: E402
from common import payload_codec  # noqa: E402
from common.agent_args import AGENT_PROGRAM, AgentArgs  # noqa: E402
from common.temporal_names import trial_workflow_id  # noqa: E402
from deploy import local_cluster  # noqa: E402

EXAMPLE = REPO / "examples" / "torch_digits"
TERMINAL = ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED")
POLL = 0.02
FIRST_BATCH = re.compile(r"\[rank=(\d+)\].*finished its first batch")
THROUGHPUT = re.compile(r"\[rank=0\].*in ([\d.]+) s: ([\d.]+) batches/s, (\d+) samples/s")


def config(ranks: int, batches: int, run: str) -> str:
    data = yaml.safe_load((EXAMPLE / "distributed.yaml").read_text())
    data["name"] = f"bench-distributed-{run}"
    data["resources"]["slots_per_trial"] = ranks
    data["searcher"]["max_length"] = {"batches": batches}
    return yaml.safe_dump(data)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def _opened(temporal: Client, payloads: Payloads) -> list[Payload]:
    codec = temporal.data_converter.payload_codec
    return await codec.decode(payloads.payloads) if codec else list(payloads.payloads)


async def granted_at(temporal: Client, experiment_id: int, trial_id: int) -> datetime:
    """When the trial workflow received its slots: the `slots_granted` signal, or the
    `request_slots` local activity that answered "granted" (its completion time)."""
    handle = temporal.get_workflow_handle(trial_workflow_id(experiment_id, trial_id))
    async for event in handle.fetch_history_events():
        attrs = event.workflow_execution_signaled_event_attributes
        if event.HasField("workflow_execution_signaled_event_attributes") and (
                attrs.signal_name == "slots_granted"):
            return event.event_time.ToDatetime().astimezone()
        if event.HasField("marker_recorded_event_attributes"):
            details = event.marker_recorded_event_attributes.details
            if "data" not in details or "result" not in details:
                continue
            # The cluster encrypts what it gives Temporal (common/payload_codec.py).
            data = json.loads((await _opened(temporal, details["data"]))[0].data)
            result = json.loads((await _opened(temporal, details["result"]))[0].data or b"null")
            if (data.get("activity_type") == "request_slots" and isinstance(result, dict)
                    and result.get("status") == "granted"):
                done = data["complete_time"]
                return datetime.fromtimestamp(
                    done["seconds"] + done.get("nanos", 0) / 1e9).astimezone()
    raise SystemExit(f"trial {trial_id}: its slots were never granted in its history")


async def parts_started(temporal: Client, experiment_id: int, trial_id: int,
                        parts: int) -> datetime | None:
    """When the last of the run's `parts` run_trial activities started, once all have."""
    handle = temporal.get_workflow_handle(trial_workflow_id(experiment_id, trial_id))
    try:
        desc = await handle.describe()
    except Exception:  # not started yet
        return None
    started = [p.last_started_time.ToDatetime().astimezone()
               for p in desc.raw_description.pending_activities
               if p.activity_type.name == "run_trial" and p.HasField("last_started_time")]
    return max(started) if len(started) == parts else None


async def measure(api: httpx.AsyncClient, temporal: Client, files: list[dict[str, Any]],
                  ranks: int, batches: int, run: str,
                  agent_slots: int = 2) -> tuple[float, float, float, float]:
    """(parts started s, start-up s, batches/s, samples/s) of one run at `ranks`."""
    body = {"config": config(ranks, batches, run), "modelDefinition": files}
    response = await api.post("/api/v1/experiments", json=body)
    response.raise_for_status()
    experiment_id = response.json()["experiment"]["id"]
    deadline = time.monotonic() + 600
    trial_id: int | None = None
    started: datetime | None = None
    while True:
        if trial_id is None:
            trials = (await api.get(f"/api/v1/experiments/{experiment_id}/trials")).json()
            trial_id = trials["trials"][0]["id"] if trials["trials"] else None
        if trial_id is not None and started is None:
            started = await parts_started(temporal, experiment_id, trial_id,
                                          parts=1 if ranks <= agent_slots else 2)
            if started is None:
                await asyncio.sleep(POLL)
                continue
        state = (await api.get(f"/api/v1/experiments/{experiment_id}")).json()
        if state["experiment"]["state"] in TERMINAL:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"experiment {experiment_id} did not end in 600 s")
        await asyncio.sleep(0.2)
    trial = (await api.get(f"/api/v1/experiments/{experiment_id}/trials")).json()["trials"][0]
    logs_text = (await api.get(f"/api/v1/trials/{trial['id']}/logs")).text
    lines = [yaml.safe_load(line)["result"] for line in logs_text.splitlines() if line.strip()]
    if state["experiment"]["state"] != "STATE_COMPLETED":
        tail = "\n".join(line["log"] for line in lines[-30:])
        raise SystemExit(f"experiment {experiment_id} ended {state['experiment']['state']}:\n"
                         f"{tail}")
    firsts = {int(m.group(1)): _time(line["timestamp"]) for line in lines
              if (m := FIRST_BATCH.search(line["log"]))}
    if sorted(firsts) != list(range(ranks)):
        raise SystemExit(f"experiment {experiment_id}: first-batch lines of ranks "
                         f"{sorted(firsts)}, expected 0-{ranks - 1}")
    found = [m for line in lines if (m := THROUGHPUT.search(line["log"]))]
    if not found:
        raise SystemExit(f"experiment {experiment_id}: the chief printed no throughput")
    granted = await granted_at(temporal, experiment_id, trial["id"])
    startup = (max(firsts.values()) - granted).total_seconds()
    platform = (started - granted).total_seconds() if started is not None else float("nan")
    return platform, startup, float(found[0].group(2)), float(found[0].group(3))


def start_second_agent(info: local_cluster.ClusterInfo, state: Path,
                       slots: int = 2) -> subprocess.Popen[bytes]:
    env = {**os.environ, "EPOCHAL_CLUSTER_TOKEN": info.cluster_token}
    log = open(state / "agent-2.log", "ab")  # noqa: SIM115 (the child keeps it)
    return subprocess.Popen(
        [sys.executable, *AGENT_PROGRAM, *AgentArgs(
            master=info.api_url, temporal=info.temporal_address, pool="default", slots=slots,
            work_dir=str(state / "agent-2"), agent_id="agent-2",
            hide_from_trials=[str(state)]).argv()],
        env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


async def wait_for_agents(api: httpx.AsyncClient, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        agents = (await api.get("/api/v1/agents")).json()["agents"]
        if sum(1 for a in agents if a.get("enabled", True)) >= count:
            return
        await asyncio.sleep(0.3)
    raise SystemExit(f"fewer than {count} agents registered in 60 s")


async def run_bench(info: local_cluster.ClusterInfo, rank_counts: list[int], batches: int,
                    runs: int, warm_ups: int = 1,
                    agent_slots: int = 2) -> dict[int, tuple[float, ...]]:
    files = package(EXAMPLE)
    temporal = await Client.connect(info.temporal_address,
                                    data_converter=payload_codec.data_converter(info.cluster_token))
    headers = admin_headers(info.api_url, info.admin_password)
    medians: dict[int, tuple[float, ...]] = {}
    async with httpx.AsyncClient(base_url=info.api_url, timeout=60, headers=headers) as api:
        await wait_for_agents(api, 2)
        for i in range(1, warm_ups + 1):
            await measure(api, temporal, files, 1, 10, f"warm-up-{i}", agent_slots)
        for ranks in rank_counts:
            results = []
            for i in range(1, runs + 1):
                result = await measure(api, temporal, files, ranks, batches, f"{ranks}-{i}",
                                       agent_slots)
                results.append(result)
                print(f"{ranks} ranks, run {i}: parts started {result[0]:.2f} s, every rank "
                      f"in its first batch {result[1]:.2f} s, {result[2]:.1f} batches/s, "
                      f"{result[3]:.0f} samples/s", flush=True)
            medians[ranks] = tuple(statistics.median(r[k] for r in results) for k in range(4))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="1,2,4", help="rank counts (default: %(default)s)")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warm-ups", type=int, default=1,
                        help="untimed 1-rank runs of 10 batches before the timed ones")
    parser.add_argument("--agent-slots", type=int, default=2,
                        help="slots of each of the two agents (ranks up to twice this)")
    # 2 ranks on two agents of 1 slot: ranks on both agents, as 4 ranks on 2 x 2 slots; 10
    # batches: the first training report (an all-reduce of the loss) comes at batch 10.
    add_smoke_option(parser, ranks="2", agent_slots=1, batches=10, runs=1, warm_ups=0)
    args = parse_args(parser)
    rank_counts = [int(r) for r in args.ranks.split(",") if r.strip()]
    if args.agent_slots < 1:
        parser.error("--agent-slots: at least 1")
    allowed = sorted({1, args.agent_slots, 2 * args.agent_slots})
    if any(r not in allowed for r in rank_counts):
        parser.error(f"--ranks: {', '.join(map(str, allowed))} (two agents of "
                     f"{args.agent_slots} slots)")
    with bench_cluster(agent_slots=args.agent_slots) as (settings, info):
        second = start_second_agent(info, settings.state_dir, args.agent_slots)
        try:
            medians = asyncio.run(run_bench(info, rank_counts, args.batches, args.runs,
                                           args.warm_ups, args.agent_slots))
        finally:
            second.terminate()
            second.wait(30)
    summary = ", ".join(f"{r} ranks {m[0]:.2f} s / {m[1]:.2f} s / {m[2]:.1f} batches/s / "
                        f"{m[3]:.0f} samples/s" for r, m in medians.items())
    print(f"slots granted -> every part started / every rank in its first batch, DDP "
          f"throughput (median of {args.runs}, torch digits, {args.batches} batches, 2 agents "
          f"x {args.agent_slots} CPU slots): {summary}")


if __name__ == "__main__":
    main()
