"""`epochal slot list` and `epochal job list`: who runs where, and what waits, in order."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer

from cli import render
from cli.client import Client, master_url

slot_app = typer.Typer(help="List the slots of the cluster's agents.", no_args_is_help=True)
job_app = typer.Typer(help="Show the scheduler's job queue.", no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]


def _dash(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


@slot_app.command("list", help="List every agent's slots and the trial running on each.")
def list_slots(ctx: typer.Context, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        agents = client.get("/agents").get("agents") or []
        slots: list[dict[str, Any]] = []
        for agent in agents:
            answer = client.get(f"/agents/{quote(str(agent['id']), safe='')}/slots")
            slots += [{"agentId": agent["id"], **s} for s in answer.get("slots") or []]
    if as_json:
        render.print_json({"slots": slots})
        return
    if not slots:
        render.say("No slots: no agents registered.")
        return
    t = render.table("Agent", "Slot", "Type", "Device", "Enabled", "Allocation", "Trial",
                     shrink=["Allocation", "Device", "Agent"])
    for s in slots:
        device = s.get("device") or {}
        t.add_row(
            str(s["agentId"]), str(s.get("id")),
            str(s.get("type") or "TYPE_CPU").removeprefix("TYPE_"),
            _dash(device.get("brand")), "yes" if s.get("enabled") else "no",
            _dash(s.get("allocationId")), _dash(s.get("trialId")),
        )
    render.show(t)


@job_app.command("list", help="List experiments holding or waiting for slots, in queue order.")
def list_jobs(
    ctx: typer.Context,
    pool: Annotated[str | None, typer.Option("--pool", help="Only this resource pool.")] = None,
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get("/job-queues", params={"resourcePool": pool} if pool else None)
    if as_json:
        render.print_json(answer)
        return
    jobs = answer.get("jobs") or []
    if not jobs:
        render.say("No jobs: nothing runs or waits.")
        return
    t = render.table("#", "Job", "Pool", "Priority", "State", "Slots held", "Slots wanted",
                     "Running", "Queued", shrink=["Job", "Pool"])
    for j in jobs:
        summary = j.get("summary") or {}
        t.add_row(
            str(summary.get("jobsAhead", "")), str(j.get("jobId")), str(j.get("resourcePool")),
            str(j.get("priority")), str(summary.get("state", "")).removeprefix("STATE_"),
            str(j.get("allocatedSlots")), str(j.get("requestedSlots")),
            str(j.get("runningTrials")), str(j.get("queuedTrials")),
        )
    render.show(t)
    for j in jobs:
        if j.get("waiting"):
            render.say(f"{j.get('jobId')} waits for agents: {j['waiting']}")
