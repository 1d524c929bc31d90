"""`epochal slot list|enable|disable` and `epochal job list|update`: who runs where, and what
waits, in order; a slot taken out of service (and why) or back; a waiting job moved."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer

from cli import render
from cli.client import Client, master_url

slot_app = typer.Typer(help="List, disable and enable the slots of the cluster's agents.",
                       no_args_is_help=True)
job_app = typer.Typer(help="Show and reorder the scheduler's job queue.", no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]


def _dash(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


@slot_app.command("list", help="List every agent's slots and the trial or task holding each.")
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
    t = render.table("Agent", "Slot", "Type", "Device", "Enabled", "Allocation", "In use by",
                     shrink=["Allocation", "Device", "Agent", "In use by", "Enabled"])
    for s in slots:
        device = s.get("device") or {}
        t.add_row(
            str(s["agentId"]), str(s.get("id")),
            str(s.get("type") or "TYPE_CPU").removeprefix("TYPE_"),
            _dash(device.get("brand")), _enabled(s),
            _dash(s.get("allocationId")), _holder(s),
        )
    render.show(t)


def _enabled(slot: dict[str, Any]) -> str:
    """"yes", or "no" with why an admin disabled the slot (none: its agent is disabled)."""
    if slot.get("enabled"):
        return "yes"
    reason = slot.get("disabledReason")
    return f"no: {reason}" if reason else "no"


AgentArg = Annotated[str, typer.Argument(metavar="AGENT", show_default=False)]
SlotArg = Annotated[str, typer.Argument(metavar="SLOT", help="Slot id.", show_default=False)]


def _slot_path(agent_id: str, slot_id: str, verb: str) -> str:
    return f"/agents/{quote(agent_id, safe='')}/slots/{quote(slot_id, safe='')}/{verb}"


@slot_app.command("disable", help="Take a slot out of service (admins): what runs on it "
                  "finishes, nothing new starts there, also after its agent restarts.")
def disable_slot(
    ctx: typer.Context,
    agent_id: AgentArg,
    slot_id: SlotArg,
    reason: Annotated[str | None, typer.Option("--reason", "-r",
                                               help="Why, as `slot list` shows it.")] = None,
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.post(_slot_path(agent_id, slot_id, "disable"),
                             {"reason": reason} if reason else {})
    render.done(as_json, answer, f"Disabled slot {slot_id} of agent {agent_id}")


@slot_app.command("enable", help="Put a disabled slot back in service (admins).")
def enable_slot(
    ctx: typer.Context,
    agent_id: AgentArg,
    slot_id: SlotArg,
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.post(_slot_path(agent_id, slot_id, "enable"))
    render.done(as_json, answer, f"Enabled slot {slot_id} of agent {agent_id}")


def _holder(slot: dict[str, Any]) -> str:
    """A trial's slot names the trial ("Trial 5 (Experiment 3)"); a task's its kind, id and
    description ("notebook 3f2a9c1e-...: JupyterLab (3f2a9c1e)")."""
    if not slot.get("allocationId"):
        return "free"
    kind = str(slot.get("taskType") or "").removeprefix("TASK_TYPE_").lower()
    if kind == "trial" or not slot.get("taskId"):
        return _dash(slot.get("taskName"))
    return f"{kind} {slot['taskId']}: {_dash(slot.get('taskName'))}"


def _job_name(job: dict[str, Any]) -> str:
    """An experiment's job id (`experiment-3`); a task's kind and id."""
    kind = str(job.get("type") or "").removeprefix("TYPE_")
    if kind == "EXPERIMENT":
        return str(job.get("jobId"))
    return f"{kind.lower()} {job.get('jobId')}"


@job_app.command("list", help="List the experiments and tasks holding or waiting for slots, in "
                 "the scheduler's order: those it serves, then those that wait, each by "
                 "priority and submission. Slots: held/needed; Trials: running/queued.")
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
    t = render.table("#", "Job", "Pool", "Priority", "State", "Slots", "Trials", "Waits for",
                     shrink=["Job", "Pool", "Waits for"])
    for j in jobs:
        summary = j.get("summary") or {}
        trials = ("-" if j.get("runningTrials") is None
                  else f"{j.get('runningTrials')}/{j.get('queuedTrials')}")
        t.add_row(
            str(summary.get("jobsAhead", "")), _job_name(j), str(j.get("resourcePool")),
            str(j.get("priority")), str(summary.get("state", "")).removeprefix("STATE_"),
            f"{j.get('allocatedSlots')}/{j.get('requestedSlots')}", trials,
            _dash(j.get("waiting")),
        )
    render.show(t)


JobArg = Annotated[str, typer.Argument(metavar="JOB", help="A job id: experiment-<id>.",
                                       show_default=False)]


@job_app.command("update", help="Move a waiting experiment's job ahead of or behind another "
                 "waiting job of its pool (it takes that job's priority), move it to another "
                 "pool, or change its priority or weight.")
def update_job(
    ctx: typer.Context,
    job_id: JobArg,
    ahead_of: Annotated[str | None, typer.Option("--ahead-of", metavar="JOB",
                                                 help="Serve it just before this job.")] = None,
    behind_of: Annotated[str | None, typer.Option("--behind-of", metavar="JOB",
                                                  help="Serve it just after this job.")] = None,
    priority: Annotated[int | None, typer.Option("--priority", min=1, max=99)] = None,
    weight: Annotated[float | None, typer.Option("--weight", min=0.0)] = None,
    resource_pool: Annotated[str | None, typer.Option(
        "--resource-pool", metavar="POOL",
        help="Ask this pool for its slots from now on (a running trial keeps its slots until "
             "its run ends).")] = None,
    as_json: AsJson = False,
) -> None:
    if ahead_of and behind_of:
        raise typer.BadParameter("give --ahead-of or --behind-of, not both",
                                 param_hint="--behind-of")
    if not any((ahead_of, behind_of, resource_pool, priority is not None, weight is not None)):
        raise typer.BadParameter("nothing to change: give --ahead-of, --behind-of, "
                                 "--resource-pool, --priority or --weight", param_hint="JOB")
    update = {key: value for key, value in (
        ("jobId", job_id), ("aheadOf", ahead_of), ("behindOf", behind_of),
        ("resourcePool", resource_pool), ("priority", priority), ("weight", weight))
        if value is not None}
    with Client(master_url(ctx)) as client:
        answer = client.post("/job-queues", {"updates": [update]})
    where = (f" ahead of {ahead_of}" if ahead_of else f" behind {behind_of}" if behind_of
             else "") + (f" into resource pool {resource_pool}" if resource_pool else "")
    render.done(as_json, answer, f"Updated {job_id}{where}")
