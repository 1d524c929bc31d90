"""`epochal resources raw|aggregated`: the allocation history, as `det resources` reads it
(admins only): each allocation in a window, or slot-hours per UTC day or month."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli import render
from cli.client import Client, master_url

app = typer.Typer(help="Query historical resource allocation (admins).", no_args_is_help=True)

AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]

DAILY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
MONTHLY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"
# An aggregated entry's groupings, as the table names them.
GROUPINGS = (("user", "byUsername"), ("workspace", "byWorkspace"),
             ("pool", "byResourcePool"), ("label", "byExperimentLabel"))


def _hours(seconds: Any) -> str:
    return f"{float(seconds or 0) / 3600:.2f}"


def _dash(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


@app.command("raw", help="List every allocation of slots (a trial run's or a task's) that "
             "overlaps the window, with its seconds within it. Times are RFC 3339 "
             "(2024-01-02T00:00:00Z).")
def raw(
    ctx: typer.Context,
    timestamp_after: Annotated[str, typer.Argument(help="The window's start.")],
    timestamp_before: Annotated[str, typer.Argument(help="The window's end.")],
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get("/resources/allocation/raw", params={
            "timestampAfter": timestamp_after, "timestampBefore": timestamp_before})
    if as_json:
        render.print_json(answer)
        return
    entries = answer.get("resourceEntries") or []
    if not entries:
        render.say("No allocations in the window.")
        return
    t = render.table("Allocation", "Type", "User", "Workspace", "Experiment", "Trial", "Pool",
                     "Slots", "Agents", "Start", "End", "Hours", "Slot-hours",
                     shrink=["Allocation", "Workspace", "Agents"])
    for e in entries:
        seconds = float(e.get("seconds") or 0)
        t.add_row(
            str(e.get("allocationId")), str(e.get("taskType") or e.get("kind")).lower(),
            _dash(e.get("username")), _dash(e.get("workspaceName")),
            _dash(e.get("experimentId")), _dash(e.get("trialId")), _dash(e.get("resourcePool")),
            str(e.get("slots")), ",".join(e.get("agentIds") or []) or "-",
            render.when(e.get("startTime"), compact=True),
            render.when(e.get("endTime"), compact=True) if e.get("endTime") else "(holding)",
            _hours(seconds), _hours(seconds * int(e.get("slots") or 0)),
        )
    render.show(t)


@app.command("aggregated", help="Slot-hours per UTC day (YYYY-MM-DD dates) or month "
             "(--monthly, YYYY-MM), in all and by user, workspace, pool and experiment label, "
             "from START_DATE to END_DATE included.")
def aggregated(
    ctx: typer.Context,
    start_date: Annotated[str, typer.Argument(help="The first day (or month) to include.")],
    end_date: Annotated[str, typer.Argument(help="The last day (or month) to include.")],
    monthly: Annotated[bool, typer.Option("--monthly", help="By month, not by day.")] = False,
    as_json: AsJson = False,
) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get("/resources/allocation/aggregated", params={
            "startDate": start_date, "endDate": end_date,
            "period": MONTHLY if monthly else DAILY})
    if as_json:
        render.print_json(answer)
        return
    t = render.table("Period", "By", "Key", "Slot-hours", shrink=["Key"])
    for e in answer.get("resourceEntries") or []:
        t.add_row(str(e.get("periodStart")), "total", "-", _hours(e.get("seconds")))
        for by, field in GROUPINGS:
            for key, seconds in sorted((e.get(field) or {}).items()):
                t.add_row(str(e.get("periodStart")), by, _dash(key), _hours(seconds))
    render.show(t)
