"""`epochal agent ...`: list the cluster's agents, or run one on this machine."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from cli import render
from cli.client import Client, master_url
from common.agent_args import AgentArgs

app = typer.Typer(help="List agents, or run one on this machine.", no_args_is_help=True)

DEFAULT_TEMPORAL = "127.0.0.1:7233"

AsJson = Annotated[bool, typer.Option("--json", help="Print the server's JSON.")]
AgentId = Annotated[str, typer.Argument(help="Agent id.")]


def slots_text(slots: Any) -> str:
    """`4 (CPU)`, `8 (CUDA)` or `2 (CPU) + 1 (CUDA)` from an agent's slots."""
    values = list(slots.values()) if isinstance(slots, Mapping) else slots
    if not isinstance(values, list) or not values:
        return "0"
    kinds = Counter(
        str(s.get("type") or "TYPE_CPU").removeprefix("TYPE_") if isinstance(s, Mapping) else "?"
        for s in values
    )
    return " + ".join(f"{n} ({kind})" for kind, n in sorted(kinds.items()))


def _yes(value: Any) -> str:
    if value is None:
        return "-"
    return "yes" if value else "no"


@app.command("list", help="List the agents registered with the master.")
def list_agents(ctx: typer.Context, as_json: AsJson = False) -> None:
    with Client(master_url(ctx)) as client:
        answer = client.get("/agents")
    if as_json:
        render.print_json(answer)
        return
    agents = answer.get("agents") or []
    if not agents:
        render.say("No agents registered.")
        return
    t = render.table(
        "ID", "Pool", "Slots", "Alive", "Enabled", "Registered", "Last seen",
        shrink=["Slots", "Registered", "Last seen", "Pool"]
    )
    for a in agents:
        t.add_row(
            str(a.get("id")),
            str(a.get("resourcePool") or "-"),
            slots_text(a.get("slots")),
            _yes(a.get("alive")),
            _yes(a.get("enabled")),
            render.when(a.get("registeredTime"), compact=True),
            render.when(a.get("lastSeen"), compact=True),
        )
    render.show(t)


def _set_enabled(ctx: typer.Context, agent_id: str, enabled: bool, as_json: bool) -> None:
    from urllib.parse import quote

    verb = "enable" if enabled else "disable"
    with Client(master_url(ctx)) as client:
        answer = client.post(f"/agents/{quote(agent_id, safe='')}/{verb}")
    render.done(as_json, answer if isinstance(answer, dict) and answer else
                {"id": agent_id, "enabled": enabled},
                f"Agent {agent_id} {verb}d" + ("" if enabled else
                ": its running trials finish, no new ones start on it."))


@app.command("disable", help="Drain an agent: running trials finish, no new ones start on it.")
def disable(ctx: typer.Context, agent_id: AgentId, as_json: AsJson = False) -> None:
    _set_enabled(ctx, agent_id, False, as_json)


@app.command("enable", help="Let a disabled agent take new trials again.")
def enable(ctx: typer.Context, agent_id: AgentId, as_json: AsJson = False) -> None:
    _set_enabled(ctx, agent_id, True, as_json)


def run_agent(argv: list[str]) -> NoReturn:
    """Run the agent in this process, as `python -m agent_worker ARGV` does; the process ends
    with the agent (imported here so that the rest of the CLI starts fast)."""
    from agent_worker.main import exit_process, main

    exit_process(main(argv))


@app.command(
    "run",
    help=(
        "Run an agent on this machine: it registers with the master and runs trials on its "
        "slots until stopped."
    ),
)
def run(
    ctx: typer.Context,
    master: Annotated[
        str | None, typer.Option("--master", help="Master URL (default: the root -m/--master).")
    ] = None,
    temporal: Annotated[
        str | None,
        typer.Option(
            "--temporal",
            help=f"Temporal frontend address (default: env EPOCHAL_TEMPORAL_ADDRESS, else "
            f"{DEFAULT_TEMPORAL}).",
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Temporal namespace (default: env "
                     "EPOCHAL_TEMPORAL_NAMESPACE, else 'default'); TLS and credentials come "
                     "from EPOCHAL_TEMPORAL_TLS_* and EPOCHAL_TEMPORAL_API_KEY "
                     "(deploy/README.md)."),
    ] = None,
    pool: Annotated[str, typer.Option("--pool", help="Resource pool to join.")] = "default",
    slots: Annotated[
        int | None, typer.Option("--slots", min=1, help="Slots to offer (default: detected).")
    ] = None,
    work_dir: Annotated[
        Path | None, typer.Option("--work-dir", help="Where trials run and keep their files.")
    ] = None,
    agent_id: Annotated[
        str | None, typer.Option("--agent-id", help="Agent id (default: the agent's own choice).")
    ] = None,
    runtime: Annotated[
        str | None,
        typer.Option("--runtime", help="Run trials as host processes ('process', the default), "
                     "in Docker containers ('docker'), or 'auto' (Docker if an engine answers)."),
    ] = None,
    image_pull: Annotated[
        str | None,
        typer.Option("--image-pull", help="Docker runtime: pull a trial's image when it is "
                     "'missing' here (default), 'always', or 'never'."),
    ] = None,
    task_env: Annotated[
        Path | None,
        typer.Option("--task-env", envvar="EPOCHAL_TASK_ENV",
                     help="Process runtime: the Python environment (virtualenv or conda prefix) "
                     "trials run in; its bin comes first on PATH, so `python3` is the user's "
                     "(default: the agent's own)."),
    ] = None,
    task_user: Annotated[
        str | None,
        typer.Option("--task-user", envvar="EPOCHAL_TASK_USER",
                     help="The one unprivileged user every user's runs are (default, when the "
                     "agent is root: each user's own identity; else the agent's own user; "
                     "'root' runs process-runtime trials unsandboxed)."),
    ] = None,
    hide_from_trials: Annotated[
        list[Path] | None,
        typer.Option("--hide-from-trials", help="Process runtime with a task user: a "
                     "directory trials must not see (repeatable; the work dir and the agent "
                     "user's home always are)."),
    ] = None,
    close_to_trials: Annotated[
        list[str] | None,
        typer.Option("--close-to-trials", metavar="HOST:PORT", help="Process runtime with a "
                     "task user: an address trials may not connect to (repeatable; Temporal's "
                     "always is)."),
    ] = None,
) -> None:
    for name, value, allowed in (("--runtime", runtime, ("process", "docker", "auto")),
                                 ("--image-pull", image_pull, ("missing", "always", "never"))):
        if value is not None and value not in allowed:
            raise typer.BadParameter(f"must be one of {', '.join(allowed)}, got {value!r}",
                                     param_hint=name)
    argv = AgentArgs(
        master=master or master_url(ctx),
        temporal=temporal or os.environ.get("EPOCHAL_TEMPORAL_ADDRESS") or DEFAULT_TEMPORAL,
        pool=pool,
        namespace=namespace,
        slots=slots,
        work_dir=str(work_dir) if work_dir is not None else None,
        agent_id=agent_id,
        runtime=runtime,
        image_pull=image_pull,
        task_env=str(task_env) if task_env is not None else None,
        task_user=task_user,
        hide_from_trials=[str(d) for d in hide_from_trials or []],
        close_to_trials=close_to_trials or [],
    ).argv()
    run_agent(argv)
