"""`epochal cluster up/down/status`: the embedded local cluster (deploy.local_cluster)."""

from __future__ import annotations

import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from cli import render
from cli.client import CliError

app = typer.Typer(
    help="Start, stop and inspect the local cluster (PostgreSQL, Temporal, master, one agent).",
    no_args_is_help=True,
)

StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Where the cluster keeps its data, logs and pid files "
        "(default: env EPOCHAL_STATE_DIR, else ~/.epochal/cluster).",
        show_default=False,
    ),
]

ApiPort = Annotated[int | None, typer.Option(help="Master REST API port [8080].")]
TemporalPort = Annotated[int | None, typer.Option(help="Temporal frontend port [7233].")]
TemporalUiPort = Annotated[int | None, typer.Option(help="Temporal web UI port [8233].")]
PostgresPort = Annotated[int | None, typer.Option(help="PostgreSQL port [54329].")]


def settings(**given: Any) -> Any:
    """The cluster's settings: those its last `up` saved, overridden by the options given."""
    from deploy.local_cluster import load_settings

    return _run(load_settings, **{k: v for k, v in given.items() if v is not None})


def _cluster_errors() -> tuple[type[BaseException], ...]:
    from deploy.local_cluster import ClusterError

    return (ClusterError,)


def _run(action: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the local cluster, turning its ClusterError into the CLI's plain error."""
    errors = _cluster_errors()
    try:
        return action(*args, **kwargs)
    except errors as exc:
        raise CliError(str(exc)) from None


SECRET_FIELDS = frozenset({"admin_password", "cluster_token", "s3_access_key", "s3_secret_key"})



def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, dict):
        # Secrets stay in STATE/secrets.json; status output may end up in logs.
        from deploy.postgres import without_password

        # The database's password stays in STATE/postgres.password.
        return {k: without_password(v) if k == "db_url" else _plain(v)
                for k, v in value.items() if k not in SECRET_FIELDS}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _check_host(host: str) -> None:
    """--host must be an address of this machine that others can connect to."""
    import ipaddress

    from common.processes import address_is_local

    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise typer.BadParameter(f"must be an IP address of this machine, got {host!r}",
                                 param_hint="--host") from None
    if address.is_unspecified:
        raise typer.BadParameter(f"{host} is no address to reach: give the address of this "
                                 "machine that agents on other machines reach it at",
                                 param_hint="--host")
    if not address_is_local(host):
        raise typer.BadParameter(f"{host} is not an address of this machine", param_hint="--host")


@app.command("up", help="Start the local cluster (whatever part is not running yet).")
def up(
    state_dir: StateDir = None,
    api_port: ApiPort = None,
    temporal_port: TemporalPort = None,
    temporal_ui_port: TemporalUiPort = None,
    postgres_port: PostgresPort = None,
    host: Annotated[
        str | None,
        typer.Option(help="The address of this machine that agents on other machines reach "
                     "the cluster at: the API and the S3 server listen there, Temporal's dev "
                     "server on all addresses (it authenticates nobody: use it on a trusted "
                     "network; see deploy/README.md) [127.0.0.1, or what the last `up` "
                     "used]."),
    ] = None,
    slots: Annotated[
        int | None, typer.Option(min=1, help="Slots of the local agent [the CPU count].")
    ] = None,
    runtime: Annotated[
        str | None,
        typer.Option(help="How the local agent runs trials: 'process', 'docker' (task "
                     "containers; build the image with `epochal image build`) or 'auto' "
                     "[process, or what the last `up` used]."),
    ] = None,
    task_env: Annotated[
        str | None,
        typer.Option("--task-env", envvar="EPOCHAL_TASK_ENV", show_envvar=False,
                     help="Process runtime: the Python environment (virtualenv or conda "
                     "prefix) the local agent runs trials in, so `python3` is yours "
                     "(env EPOCHAL_TASK_ENV; '' for the agent's own) [what the last `up` "
                     "used, else the agent's own]."),
    ] = None,
    task_user: Annotated[
        str | None,
        typer.Option("--task-user", envvar="EPOCHAL_TASK_USER", show_envvar=False,
                     help="The one unprivileged user the local agent runs every user's runs "
                     "as; 'root' runs them unsandboxed [what the last `up` used, else each "
                     "user's own identity as root, else your own user]."),
    ] = None,
    s3: Annotated[
        bool | None,
        typer.Option("--s3/--no-s3", help="Run a local S3 server (SeaweedFS) and keep "
                     "checkpoints there by default, so agents on other machines share them "
                     "[what the last `up` used, else no]."),
    ] = None,
    s3_port: Annotated[int | None, typer.Option(help="The local S3 server's port [8333]; "
                                                "SeaweedFS uses the 9 ports after it too.")]
    = None,
    traces: Annotated[
        bool | None,
        typer.Option("--traces/--no-traces", help="Keep the master's and the agent's traces "
                     "(OpenTelemetry) in STATE/traces.jsonl; set EPOCHAL_TRACES_FILE to that "
                     "file for the CLI's own [what the last `up` used, else no]."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the cluster's addresses as "
                                          "JSON (the admin's password stays in "
                                          "STATE/secrets.json).")] = False,
) -> None:
    if runtime is not None and runtime not in ("process", "docker", "auto"):
        raise typer.BadParameter(f"must be process, docker or auto, got {runtime!r}",
                                 param_hint="--runtime")
    if host is not None:
        _check_host(host)
    if task_env:
        from agent_worker.task_env import TaskEnvError, TaskEnvironment

        try:
            task_env = str(TaskEnvironment.open(Path(task_env)).prefix)
        except TaskEnvError as err:
            raise typer.BadParameter(str(err).removeprefix("--task-env "),
                                     param_hint="--task-env") from None
    from deploy import local_cluster

    s = settings(
        state_dir=state_dir,
        api_port=api_port,
        temporal_port=temporal_port,
        temporal_ui_port=temporal_ui_port,
        postgres_port=postgres_port,
        host=host,
        agent_slots=slots,
        agent_runtime=runtime,
        agent_task_env=task_env,
        agent_task_user=task_user,
        s3=s3,
        s3_port=s3_port,
        traces=traces,
    )

    def report(message: str) -> None:
        sys.stderr.write(f"starting {message}\n")
        sys.stderr.flush()

    info = _run(local_cluster.up, s, report=report)
    from cli.client import ApiError
    from cli.user import log_in

    try:
        log_in(info.api_url, "admin", info.admin_password)
        logged_in = True
    except ApiError as err:
        if err.status != 401:
            raise
        logged_in = False
    checkpoints = (f"s3://{local_cluster.S3_BUCKET} at {info.s3_endpoint}"
                   if info.s3_endpoint else str(info.state_dir / "checkpoints"))
    if as_json:
        render.print_json({
            "api": info.api_url, "dashboard": info.dashboard_url, "loggedInAsAdmin": logged_in,
            "temporal": info.temporal_address, "temporalUi": info.temporal_ui_url,
            "checkpoints": checkpoints, "stateDir": str(info.state_dir),
            "traces": str(s.traces_file) if s.traces else None})
        return
    if logged_in:
        render.say("Local cluster is up; this CLI is logged in as admin.")
    else:
        render.say("Local cluster is up. admin's password was changed since the first `up`: "
                   "log in with `epochal user login`.")
    rows = [
        ("API", info.api_url),
        ("Dashboard", info.dashboard_url),
        ("Log in as", f"admin / {info.admin_password}  (kept in {info.state_dir}/secrets.json)"),
        ("Temporal", info.temporal_address),
        ("Temporal UI", info.temporal_ui_url or "-"),
        ("Checkpoints", checkpoints),
        ("State", str(info.state_dir)),
        *([("Traces", str(s.traces_file))] if s.traces else []),
    ]
    render.show(render.fields(rows))
    if s.host != local_cluster.HOST:
        render.say(
            "Join an agent on another machine with `EPOCHAL_CLUSTER_TOKEN=<cluster_token from "
            f"secrets.json> epochal agent run --master {info.api_url} --temporal "
            f"{info.temporal_address} --work-dir DIR`."
        )
    if info.api_url != "http://127.0.0.1:8080":
        render.say(
            f"Point the CLI at it with `-m {info.api_url}` or EPOCHAL_MASTER={info.api_url}."
        )


@app.command("down", help="Stop the local cluster; its data is kept for the next `up`.")
def down(
    state_dir: StateDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was stopped as JSON.")]
    = False,
) -> None:
    from deploy import local_cluster

    stopped = _run(local_cluster.down, settings(state_dir=state_dir))
    if as_json:
        render.print_json({"stopped": list(stopped or [])})
    elif stopped:
        render.say(f"Stopped {', '.join(stopped)}.")
    else:
        render.say("Nothing was running.")


@app.command(
    "status",
    help="Show each part of the local cluster: running, answering, address; with -m or "
    "EPOCHAL_MASTER (and no --state-dir), the master there and its agents. Exit code 1 when a "
    "part does not answer.",
)
def status(
    ctx: typer.Context,
    state_dir: StateDir = None,
    api_port: ApiPort = None,
    temporal_port: TemporalPort = None,
    temporal_ui_port: TemporalUiPort = None,
    postgres_port: PostgresPort = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the status as JSON.")] = False,
) -> None:
    named = _named_master(ctx)
    if named is not None and state_dir is None:
        _remote_status(named, as_json)
        return
    from deploy import local_cluster

    s = settings(
        state_dir=state_dir,
        api_port=api_port,
        temporal_port=temporal_port,
        temporal_ui_port=temporal_ui_port,
        postgres_port=postgres_port,
    )
    result = _run(local_cluster.status, s)
    if as_json:
        data = _plain(result)
        if isinstance(data, dict):
            data["allAnswering"] = bool(getattr(result, "all_answering", False))
        render.print_json(data)
    else:
        _show_status(result)
    if not getattr(result, "all_answering", True):
        raise typer.Exit(1)


def _named_master(ctx: typer.Context) -> str | None:
    """The master the user named (`-m`, else EPOCHAL_MASTER), when it is not this machine's
    local cluster (nor is a state dir named, EPOCHAL_STATE_DIR): `status` reports that one."""
    import os

    from cli.client import MASTER_ENV, master_url

    given = ctx.find_root().params.get("master") or os.environ.get(MASTER_ENV)
    if not given or os.environ.get("EPOCHAL_STATE_DIR"):
        return None
    from deploy.local_cluster import load_settings

    url = master_url(ctx)
    local = load_settings()
    ours = {f"http://{host}:{local.api_port}" for host in (local.host, "127.0.0.1", "localhost")}
    return None if url in ours else url


def _remote_status(url: str, as_json: bool) -> None:
    """A master the user named (not this machine's local cluster): whether it answers, what it
    is, and (logged in) its agents."""
    from cli.client import ApiError, Client, ConnectionLost, MasterUnreachable

    found: dict[str, Any] = {"master": url, "dashboard": f"{url}/", "answering": False}
    try:
        with Client(url, anonymous=True) as client:
            master = client.get("/master")
        found.update(answering=True, clusterName=master.get("clusterName"),
                     version=master.get("version"))
        with Client(url) as client:
            agents = client.get("/agents").get("agents") or []
        found["agents"] = [{"id": a.get("id"), "slots": len(a.get("slots") or {}),
                            "enabled": a.get("enabled", True)} for a in agents]
    except (MasterUnreachable, ConnectionLost) as err:
        found["error"] = err.message
    except ApiError as err:  # answering, but not to this caller (not logged in)
        found["agents_error"] = err.message
    if as_json:
        render.print_json({**found, "allAnswering": found["answering"]})
    else:
        t = render.table("Part", "Answering", "Address", shrink=["Address"])
        t.add_row("master", "yes" if found["answering"] else "no", url)
        for agent in found.get("agents", []):
            t.add_row("agent", "yes" if agent["enabled"] else "disabled",
                      f"{agent['id']} ({agent['slots']} slots)")
        render.show(t)
        if "error" in found:
            render.say(found["error"])
        elif "agents_error" in found:
            render.say(f"agents: {found['agents_error']}")
        else:
            render.say(f"Cluster: {found['clusterName']} (Epochal {found['version']})")
            render.say(f"Dashboard: {found['dashboard']}")
    if not found["answering"]:
        raise typer.Exit(1)


def _show_status(result: Any) -> None:
    t = render.table("Part", "PID", "Running", "Answering", "Address", shrink=["Address"])
    for part in result.parts:
        t.add_row(
            part.name,
            str(part.pid) if part.pid else "-",
            "yes" if part.running else "no",
            "yes" if part.answering else "no",
            part.address + (" (external)" if getattr(part, "external", False) else ""),
        )
    render.show(t)
    info = result.info
    logs = sorted({str(p.log_file.parent) for p in result.parts if p.log_file is not None})
    if logs:
        render.say(f"Logs: {', '.join(logs)}")
    render.say(f"Dashboard: {info.dashboard_url}")
    if info.temporal_ui_url:
        render.say(f"Temporal UI: {info.temporal_ui_url}")
