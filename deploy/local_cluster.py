"""The embedded local cluster: PostgreSQL, Temporal, the master and one agent on this machine.

`up` starts whatever is not running yet, in dependency order, and waits until each part answers,
so `epochal cluster up` either returns a working cluster or a ClusterError that says which part
failed and shows the end of its log. Every part runs detached (it outlives the command), with its
log in STATE/logs/<part>.log and its pid in STATE/run/<part>.pid. `down` stops them and keeps
all data, so the next `up` finds experiments, workflows and checkpoints where they were.

With env EPOCHAL_DB_URL / EPOCHAL_TEMPORAL_ADDRESS set, the cluster uses that PostgreSQL /
Temporal instead of starting its own. With `s3` set (`epochal cluster up --s3`) it also runs a
local S3 server (SeaweedFS) and makes it the default checkpoint storage. With `host` set to an
address of this machine (`--host`), the API and the S3 server listen there (Temporal's dev
server on every address: deploy/temporal_server.py), so agents on other machines join with
`epochal agent run`; PostgreSQL always listens on 127.0.0.1 (only the master uses it).

Trials reach the API and the S3 endpoint only: the local agent closes every other address of
the servers the cluster runs to them (`--close-to-trials`, agent_worker/trial_firewall.py), as
each server lists them (`closed_to_trials`). The dev server's HTTP API and metrics ports, random
unless given, are picked at the first `up` and saved with the others; its internal services'
ports, which no option sets, are read from its process before the agent starts.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import httpx

from common import processes
from common.agent_args import AGENT_PROGRAM, AgentArgs
from common.processes import ClusterError, failure
from deploy import temporal_server
from deploy.postgres import EmbeddedPostgres, database_url, without_password
from deploy.s3_server import SeaweedFSServer
from deploy.temporal_server import TemporalDevServer

if TYPE_CHECKING:
    from agent_worker.sandbox import TaskUser

__all__ = [
    "PARTS", "ClusterError", "ClusterInfo", "ClusterSettings", "ClusterStatus", "PartStatus",
    "cluster_info", "default_state_dir", "down", "load_settings", "status", "up",
]

PARTS = ("postgres", "temporal", "s3", "master", "agent")
S3_BUCKET = "checkpoints"
HOST = "127.0.0.1"
AGENT_ID = "local-agent"
DATABASE = "epochal"


def default_state_dir() -> Path:
    return Path(os.environ.get("EPOCHAL_STATE_DIR") or Path.home() / ".epochal" / "cluster")


@dataclass
class ClusterSettings:
    """Where the local cluster keeps its state and which ports it uses."""

    state_dir: Path = field(default_factory=default_state_dir)
    api_port: int = 8080
    temporal_port: int = 7233
    temporal_ui_port: int = 8233
    # The dev server's HTTP API and metrics: picked by `up` (None: not yet; see _pin_ports).
    temporal_http_port: int | None = None
    temporal_metrics_port: int | None = None
    postgres_port: int = 54329
    # Where the API, Temporal and the S3 server listen and are reached: 127.0.0.1, or an address
    # of this machine that agents on other machines reach it at.
    host: str = HOST
    agent_slots: int = field(default_factory=lambda: os.cpu_count() or 1)
    agent_runtime: str = "process"  # the local agent's --runtime: process | docker | auto
    agent_task_env: str | None = None  # the local agent's --task-env (process runtime)
    agent_task_user: str | None = None  # the local agent's --task-user (None: its default)
    headless_temporal: bool = False
    # A local S3 server as the default checkpoint storage (instead of STATE/checkpoints).
    s3: bool = False
    s3_port: int = 8333
    # The master's and the agent's traces as JSON lines in STATE/traces.jsonl (common/tracing.py).
    traces: bool = False
    # An external PostgreSQL / Temporal to use instead of starting our own.
    external_db_url: str | None = field(
        default_factory=lambda: os.environ.get("EPOCHAL_DB_URL") or None)
    external_temporal_address: str | None = field(
        default_factory=lambda: os.environ.get("EPOCHAL_TEMPORAL_ADDRESS") or None)
    # The external Temporal's web UI, if it has one: the dashboard links workflows there.
    external_temporal_ui_url: str | None = field(
        default_factory=lambda: os.environ.get("EPOCHAL_TEMPORAL_UI_URL") or None)
    start_timeout: float = 120.0
    stop_grace: float = 15.0

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir).expanduser().absolute()

    def log_file(self, part: str) -> Path:
        return self.state_dir / "logs" / f"{part}.log"

    def pid_file(self, part: str) -> Path:
        return self.state_dir / "run" / f"{part}.pid"

    @property
    def traces_file(self) -> Path:
        return self.state_dir / "traces.jsonl"


@dataclass
class ClusterInfo:
    """Addresses of a running local cluster."""

    api_url: str
    dashboard_url: str
    temporal_address: str
    temporal_ui_url: str | None
    db_url: str
    state_dir: Path
    admin_password: str = ""
    cluster_token: str = ""
    s3_endpoint: str | None = None
    s3_access_key: str = ""
    s3_secret_key: str = ""


@dataclass
class PartStatus:
    name: str
    pid: int | None
    running: bool
    answering: bool
    address: str
    log_file: Path | None
    external: bool = False


@dataclass
class ClusterStatus:
    info: ClusterInfo
    parts: list[PartStatus]

    @property
    def all_answering(self) -> bool:
        return all(p.answering for p in self.parts)


def cluster_info(settings: ClusterSettings) -> ClusterInfo:
    s = settings
    api_url = f"http://{s.host}:{s.api_port}"
    ui = None
    if s.external_temporal_address:
        ui = s.external_temporal_ui_url
    elif not s.headless_temporal:
        ui = f"http://{s.host}:{s.temporal_ui_port}"
    return ClusterInfo(
        api_url=api_url,
        dashboard_url=f"{api_url}/",
        temporal_address=s.external_temporal_address or f"{s.host}:{s.temporal_port}",
        temporal_ui_url=ui,
        db_url=s.external_db_url or database_url(s.postgres_port, DATABASE, HOST,
                                                 _postgres(s).password()),
        state_dir=s.state_dir,
        s3_endpoint=f"http://{s.host}:{s.s3_port}" if s.s3 else None,
        **_secrets(s),
    )


SECRETS_FILE = "secrets.json"


def _secrets(s: ClusterSettings) -> dict[str, str]:
    """The admin's first password, the agents' cluster token and the local S3 server's keys,
    made once (mode 0600); a file from before the S3 keys gets them added."""
    path = s.state_dir / SECRETS_FILE
    made = {"admin_password": secrets.token_urlsafe(12),
            "cluster_token": secrets.token_urlsafe(32),
            "s3_access_key": secrets.token_hex(10).upper(),
            "s3_secret_key": secrets.token_urlsafe(30)}
    if not path.exists():
        s.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(made, f, indent=2)
    try:
        data = json.loads(path.read_text())
        if not all(key in data for key in made):
            data = {**made, **data}
            path.write_text(json.dumps(data, indent=2))
        return {key: str(data[key]) for key in made}
    except (OSError, ValueError, KeyError) as err:
        raise ClusterError(f"cannot read the cluster secrets {path}: {err}") from err


SETTINGS_FILE = "cluster.json"
# What `up` remembers, so that `status` and `down` find a cluster started on other ports.
SAVED_FIELDS = ("api_port", "temporal_port", "temporal_ui_port", "temporal_http_port",
                "temporal_metrics_port", "postgres_port", "host", "agent_slots",
                "headless_temporal", "agent_runtime", "agent_task_env",
                "agent_task_user", "s3", "s3_port", "traces")


def load_settings(state_dir: Path | None = None, **overrides: object) -> ClusterSettings:
    """The settings of the cluster in `state_dir`: what its last `up` saved, then `overrides`."""
    state = Path(state_dir).expanduser() if state_dir else default_state_dir()
    saved: dict[str, object] = {}
    path = state / SETTINGS_FILE
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ClusterError(f"cannot read the cluster settings {path}: {err}") from err
        saved = {k: v for k, v in data.items() if k in SAVED_FIELDS}
    return ClusterSettings(state_dir=state, **{**saved, **overrides})  # type: ignore[arg-type]


def _save_settings(s: ClusterSettings) -> None:
    data = {name: getattr(s, name) for name in SAVED_FIELDS}
    (s.state_dir / SETTINGS_FILE).write_text(json.dumps(data, indent=2) + "\n")


# -- up ----------------------------------------------------------------------------------------


def up(settings: ClusterSettings | None = None, *, parts: Iterable[str] = PARTS,
       report: Callable[[str], None] | None = None) -> ClusterInfo:
    """Start the parts that are not running yet and wait until all answer.

    Idempotent: a part that already runs is left alone (a stale pid file is cleaned up). On
    failure the parts already started keep running; `down` stops them.
    """
    s = settings or ClusterSettings()
    wanted = set(parts)
    unknown = wanted - set(PARTS)
    if unknown:
        raise ValueError(f"unknown cluster parts: {sorted(unknown)}")
    say = report or (lambda _msg: None)
    for sub in ("logs", "run", "checkpoints", "agent"):
        (s.state_dir / sub).mkdir(parents=True, exist_ok=True)
    task_user = _task_user(s)
    per_user = task_user is not None and not s.agent_task_user  # agent_worker/sandbox.py
    checkpoints = s.state_dir / "checkpoints"
    if per_user:
        # Each user's trials write here as that user's own identity (agent_worker/sandbox.py):
        # anyone may add, nobody may remove or rename another's (the sticky bit, as /tmp), and
        # what a trial writes is its user's alone.
        checkpoints.chmod(0o1777)
    elif task_user is not None:
        # Trials write their checkpoints here as the agent's task user.
        os.chown(checkpoints, task_user.uid, task_user.gid)
    _pin_ports(s)
    _save_settings(s)
    info = cluster_info(s)

    if "postgres" in wanted and not s.external_db_url:
        say(f"postgres: {without_password(info.db_url)}")
        _up_postgres(s)
    if "temporal" in wanted and not s.external_temporal_address:
        say(f"temporal: {info.temporal_address}")
        temporal = _temporal(s)
        under_agent = (not temporal.is_running() and task_user is not None
                       and processes.read_pid(s.pid_file("agent")) is not None)
        temporal.start(s.temporal_port, ui_port=s.temporal_ui_port,
                       http_port=s.temporal_http_port, metrics_port=s.temporal_metrics_port,
                       headless=s.headless_temporal, ip=s.host, timeout=s.start_timeout,
                       ui_codec_endpoint=f"{info.api_url}/api/v1/temporal-codec")
        if under_agent:
            say("temporal under a running agent, whose firewall closes the ports its internal "
                "services had before (they change at each start): `epochal cluster down` and "
                "`up` close the new ones to trials")
    if "s3" in wanted and s.s3:
        say(f"s3: {info.s3_endpoint}, bucket {S3_BUCKET!r} (the default checkpoint storage)")
        _s3(s).start(s.s3_port, access_key=info.s3_access_key, secret_key=info.s3_secret_key,
                     bucket=S3_BUCKET, ip=s.host, timeout=s.start_timeout)
    if "master" in wanted:
        say(f"master: {info.api_url}")
        _up_process(s, "master", _master_command(), env=_master_env(s, info), port=s.api_port,
                    check=lambda: _master_answers(info.api_url))
    if "agent" in wanted:
        say(f"agent: {AGENT_ID} with {s.agent_slots} slots, {s.agent_runtime} runtime"
            + (f", task environment {s.agent_task_env}" if s.agent_task_env else "")
            + (", each user's runs as their own identity" if per_user
               else f", trials run as {task_user.name}" if task_user else ""))
        _up_process(s, "agent", _agent_command(s, info), env=_agent_env(s, info), port=None,
                    check=lambda: _agent_answers(info))
    return info


def _postgres(s: ClusterSettings) -> EmbeddedPostgres:
    return EmbeddedPostgres(s.state_dir / "postgres", log_file=s.log_file("postgres"))


def _temporal(s: ClusterSettings) -> TemporalDevServer:
    return TemporalDevServer(s.state_dir / "temporal.db", log_file=s.log_file("temporal"),
                             pid_file=s.pid_file("temporal"))


def _s3(s: ClusterSettings) -> SeaweedFSServer:
    return SeaweedFSServer(s.state_dir / "s3", log_file=s.log_file("s3"),
                           pid_file=s.pid_file("s3"))


def _pin_ports(s: ClusterSettings) -> None:
    """Pick the ports the dev server would pick at random, so that they are known (and closed
    to trials): at the first `up`, and again where one was taken while the server was down."""
    if s.external_temporal_address or _temporal(s).is_running():
        return
    for name in ("temporal_http_port", "temporal_metrics_port"):
        port = getattr(s, name)
        if port is None or processes.port_in_use(port, s.host):
            setattr(s, name, processes.free_port(s.host))


def _temporal_ports(s: ClusterSettings) -> list[int]:
    """The ports the cluster's Temporal dev server is started with."""
    ui = [] if s.headless_temporal else [s.temporal_ui_port]
    return [p for p in (s.temporal_port, s.temporal_http_port, s.temporal_metrics_port, *ui)
            if p is not None]


def _closed_to_trials(s: ClusterSettings) -> list[str]:
    """Every address of the servers the cluster runs that trials must not reach: all but the
    API's and the S3 endpoint. External servers are their operator's to close."""
    closed: list[str] = []
    if not s.external_db_url:
        closed += _postgres(s).closed_to_trials(s.postgres_port, HOST)
    if not s.external_temporal_address:
        closed += _temporal(s).closed_to_trials(_temporal_ports(s), s.host)
    if s.s3:
        closed += _s3(s).closed_to_trials(s.s3_port, s.host)
    return closed


def _up_postgres(s: ClusterSettings) -> None:
    pg = _postgres(s)
    pg.start(s.postgres_port, HOST, timeout=s.start_timeout)
    processes.wait_until(lambda: pg.answers(s.postgres_port, HOST), part="postgres",
                         log_file=pg.log_file, timeout=s.start_timeout, pid=pg.pid())
    pg.ensure_database(DATABASE, s.postgres_port, HOST)
    pid = pg.pid()
    if pid is not None:
        processes.write_pid(s.pid_file("postgres"), pid)


def _up_process(s: ClusterSettings, part: str, cmd: list[str], *, env: dict[str, str],
                port: int | None, check: Callable[[], bool]) -> None:
    log_file = s.log_file(part)
    pid = processes.read_pid(s.pid_file(part))
    if pid is None:
        if port is not None and processes.port_in_use(port, s.host):
            raise failure(part, f"port {port} on {s.host} is already in use by another process",
                          log_file)
        pid = processes.spawn(cmd, log_file=log_file, pid_file=s.pid_file(part), env=env,
                              cwd=s.state_dir).pid
    processes.wait_until(check, part=part, log_file=log_file, timeout=s.start_timeout, pid=pid)


def _cluster_id(s: ClusterSettings) -> str:
    """A stable id for this cluster, made on the first `up`."""
    path = s.state_dir / "cluster_id"
    if not path.exists():
        path.write_text(f"{uuid.uuid4()}\n")
    return path.read_text().strip()


def _base_env(s: ClusterSettings) -> dict[str, str]:
    traces = {"EPOCHAL_TRACES_FILE": str(s.traces_file)} if s.traces else {}
    return {**os.environ, "PYTHONUNBUFFERED": "1", **traces}


def _master_command() -> list[str]:
    return [sys.executable, "-m", "deploy.master"]


def _master_env(s: ClusterSettings, info: ClusterInfo) -> dict[str, str]:
    storage = {} if info.s3_endpoint is None else {"EPOCHAL_CHECKPOINT_STORAGE": json.dumps({
        "type": "s3", "bucket": S3_BUCKET, "endpoint_url": info.s3_endpoint,
        "access_key": info.s3_access_key, "secret_key": info.s3_secret_key})}
    return {
        **storage,
        **_base_env(s),
        "EPOCHAL_DB_URL": info.db_url,
        "EPOCHAL_TEMPORAL_ADDRESS": info.temporal_address,
        "EPOCHAL_API_HOST": s.host,
        "EPOCHAL_API_PORT": str(s.api_port),
        "EPOCHAL_CHECKPOINT_DIR": str(s.state_dir / "checkpoints"),
        "EPOCHAL_CLUSTER_ID": _cluster_id(s),
        "EPOCHAL_CLUSTER_TOKEN": info.cluster_token,
        "EPOCHAL_ADMIN_PASSWORD": info.admin_password,
        **({"EPOCHAL_TEMPORAL_UI_URL": info.temporal_ui_url} if info.temporal_ui_url else {}),
    }


def _agent_env(s: ClusterSettings, info: ClusterInfo) -> dict[str, str]:
    return {**_base_env(s), "EPOCHAL_CLUSTER_TOKEN": info.cluster_token}


def _agent_command(s: ClusterSettings, info: ClusterInfo) -> list[str]:
    return [sys.executable, *AGENT_PROGRAM, *AgentArgs(
        master=info.api_url, temporal=info.temporal_address, pool="default",
        slots=s.agent_slots, work_dir=str(s.state_dir / "agent"), agent_id=AGENT_ID,
        runtime=s.agent_runtime, task_env=s.agent_task_env or None,
        task_user=s.agent_task_user or None,
        # Secrets, the database's files and the logs live there.
        hide_from_trials=[str(s.state_dir)],
        close_to_trials=_closed_to_trials(s),
    ).argv()]


def _task_user(s: ClusterSettings) -> TaskUser | None:
    """The user the local agent will run trials as (agent_worker/sandbox.py)."""
    # Here, not at the top: importing the agent's package costs `status` and `down` 0.4 s.
    from agent_worker.sandbox import TaskUserError, container_user_for_agent, task_user_for_agent

    try:
        if s.agent_runtime == "docker":  # containers run unprivileged (agent_worker/sandbox.py)
            return container_user_for_agent(s.agent_task_user) if os.geteuid() == 0 else None
        return task_user_for_agent(s.agent_task_user)
    except TaskUserError as err:
        raise ClusterError(f"agent: {err}") from None


def _get_json(url: str, token: str | None = None) -> dict[str, Any] | None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        response = httpx.get(url, timeout=2.0, headers=headers)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return cast(dict[str, Any], response.json())
    except ValueError:
        return None


def _master_answers(api_url: str) -> bool:
    return _get_json(f"{api_url}/api/v1/master") is not None


def _agent_answers(info: ClusterInfo, agent_id: str = AGENT_ID) -> bool:
    body = _get_json(f"{info.api_url}/api/v1/agents", info.cluster_token) or {}
    return any(a.get("id") == agent_id and a.get("alive") for a in body.get("agents", []))


# -- down --------------------------------------------------------------------------------------


def down(settings: ClusterSettings | None = None) -> list[str]:
    """Stop agent, master, the agents the master provisioned, the S3 server, Temporal and
    PostgreSQL (in that order); data is kept.

    Returns the names of the parts that were running.
    """
    s = settings or ClusterSettings()
    stopped = []
    for part in ("agent", "master"):
        if processes.stop_pid_file(s.pid_file(part), s.stop_grace):
            stopped.append(part)
    from providers.process import pid_files

    provisioned = [f for f in pid_files(s.state_dir) if processes.stop_pid_file(f, s.stop_grace)]
    if provisioned:  # agents the master's `process` provider started
        stopped.append(f"{len(provisioned)} provisioned agent(s)")
    # An agent killed (kill -9, a crash) left its firewall rules: a port closed to runs for
    # good would break whatever listens there next. Imported here, as in _task_user.
    from agent_worker.trial_firewall import remove_rules_of_master

    remove_rules_of_master(cluster_info(s).api_url)
    if _s3(s).stop():
        stopped.append("s3")
    if _temporal(s).stop(s.stop_grace):
        stopped.append("temporal")
    if _postgres(s).stop():
        stopped.append("postgres")
    s.pid_file("postgres").unlink(missing_ok=True)
    return stopped


# -- status ------------------------------------------------------------------------------------


def status(settings: ClusterSettings | None = None) -> ClusterStatus:
    """Each part: pid, running or not, answering or not, and its address."""
    s = settings or ClusterSettings()
    info = cluster_info(s)
    parts = [_postgres_status(s, info), _temporal_status(s, info)]
    if info.s3_endpoint is not None:
        pid = _s3(s).pid()
        parts.append(PartStatus("s3", pid, pid is not None,
                                processes.tcp_answers(s.host, s.s3_port), info.s3_endpoint,
                                s.log_file("s3")))
    answering = {"master": _master_answers(info.api_url), "agent": _agent_answers(info)}
    for part, address in (("master", info.api_url), ("agent", f"{AGENT_ID} via {info.api_url}")):
        pid = processes.read_pid(s.pid_file(part))
        parts.append(PartStatus(part, pid, pid is not None, answering[part], address,
                                s.log_file(part)))
    return ClusterStatus(info, parts)


def _postgres_status(s: ClusterSettings, info: ClusterInfo) -> PartStatus:
    url = urlsplit(info.db_url)
    address = f"{url.hostname}:{url.port or 5432}"
    if s.external_db_url:
        answering = processes.tcp_answers(url.hostname or HOST, url.port or 5432)
        return PartStatus("postgres", None, answering, answering, address, None, external=True)
    pg = _postgres(s)
    pid = pg.pid()
    answering = pid is not None and pg.answers(s.postgres_port, HOST)
    return PartStatus("postgres", pid, pid is not None, answering, address, pg.log_file)


def _temporal_status(s: ClusterSettings, info: ClusterInfo) -> PartStatus:
    if s.external_temporal_address:
        from common.temporal_connection import TemporalConnectionError, TemporalSecurity

        try:
            security = TemporalSecurity.from_env()
        except TemporalConnectionError as err:
            raise ClusterError(f"temporal: {err}") from None
        namespace = os.environ.get("EPOCHAL_TEMPORAL_NAMESPACE") or temporal_server.NAMESPACE
        answering = temporal_server.answers(info.temporal_address, namespace,
                                            security=security)
        return PartStatus("temporal", None, answering, answering, info.temporal_address, None,
                          external=True)
    answering = temporal_server.answers(info.temporal_address)
    pid = _temporal(s).pid()
    return PartStatus("temporal", pid, pid is not None, answering, info.temporal_address,
                      s.log_file("temporal"))

