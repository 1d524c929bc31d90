"""A local cluster for end-to-end tests, and how tests drive it: through the `epochal` CLI.

`shared_servers_cluster` runs the real master and agent processes on the session's PostgreSQL
(a fresh database) and Temporal dev server (the end-to-end namespace, cleared first) through
EPOCHAL_DB_URL and EPOCHAL_TEMPORAL_ADDRESS, the way a cluster on external servers is set up;
or, for agents on other "hosts" (tests/e2e/hosts.py), its own Temporal on an address they reach.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from common.processes import free_port
from common.states import TERMINAL_STATES
from tests.cli_zygote import zygote
from tests.conftest import E2E_NAMESPACE, fresh_database
from tests.e2e.hosts import Host
from tests.e2e.namespace import fresh_ids, start_clean
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
# A slow trial of the test suite's own (one step per `sleep` seconds; see its docstring).
SLOW_MODEL = REPO / "tests" / "e2e" / "slow_model"
EPOCHAL = [sys.executable, "-m", "deploy.console"]
# The commands that start or stop a cluster's processes run in a fresh interpreter, as users run
# them; every client command in the zygote (tests/cli_zygote.py), which imports the CLI once.
_STARTS_PROCESSES = (("cluster",), ("master",), ("agent", "run"))
_CLIENT_MODULES = ("httpx", "pydantic", "yaml", "common.expconf", "typer.rich_utils",
                   *(f"cli.{p.stem}" for p in (REPO / "cli").glob("*.py") if p.stem != "__init__"))


@functools.cache
def _client_launcher() -> Path:
    """The launcher of this process's `epochal` zygote, started on first use, stopped at exit."""
    stack = contextlib.ExitStack()
    atexit.register(stack.close)
    directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="epochal-cli-")))
    return stack.enter_context(zygote(Path(sys.executable), "epochal", "deploy.console:app",
                                      directory, *_CLIENT_MODULES))


def epochal_command(*args: str) -> list[str]:
    """The command line that runs `epochal ARGS` (see _STARTS_PROCESSES)."""
    if any(args[:len(command)] == command for command in _STARTS_PROCESSES):
        return [*EPOCHAL, *args]
    return [str(_client_launcher()), *args]


@dataclass
class Cluster:
    env: dict[str, str]
    url: str
    state_dir: Path
    temporal_address: str
    temporal_namespace: str = E2E_NAMESPACE
    up: subprocess.CompletedProcess[str] | None = None  # what `cluster up` printed

    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 180,
        env_extra: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            epochal_command(*args),
            env={**self.env, **(env_extra or {})},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check:
            assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def get(self, path: str, **params: Any) -> Any:
        """GET `/api/v1{path}` as the admin the CLI is logged in as. Tests poll through this:
        a CLI process per poll costs a third of a core, which a suite of them ran short of."""
        answer = httpx.get(f"{self.url}/api/v1{path}", params=params, headers=self.headers,
                           timeout=30)
        answer.raise_for_status()
        return answer.json()

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        return dict(self.get(f"/experiments/{experiment_id}")["experiment"])

    def trials(self, experiment_id: int) -> list[dict[str, Any]]:
        """Every trial of the experiment, in the order trials were created."""
        return list(self.get(f"/experiments/{experiment_id}/trials")["trials"])

    def trial_logs(self, trial_id: int, **params: Any) -> list[dict[str, Any]]:
        """The trial's log lines (`GET /api/v1/trials/{id}/logs`, NDJSON), each a TrialLog."""
        answer = httpx.get(f"{self.url}/api/v1/trials/{trial_id}/logs", params=params,
                           headers=self.headers, timeout=30)
        answer.raise_for_status()
        return [json.loads(line)["result"] for line in answer.text.splitlines() if line.strip()]

    def printed(self, experiment_id: int, mark: str) -> Any:
        """The JSON the experiment's first trial printed after `mark` (`MARK {...}`), once it
        has; None before."""
        trials = self.trials(experiment_id)
        lines = [line["log"] for line in self.trial_logs(trials[0]["id"])] if trials else []
        found = [line for line in lines if mark in line]
        return json.loads(found[0].split(mark, 1)[1]) if found else None

    def ordinary_user(self, directory: Path) -> dict[str, str]:
        """A new user, not an admin, logged in: the environment that makes the CLI them."""
        name = f"user{uuid.uuid4().hex[:10]}"
        self.run("user", "create", name, env_extra={"EPOCHAL_PASSWORD": "a-long-password"})
        login = {"EPOCHAL_AUTH_FILE": str(directory / f"{name}.json")}
        self.run("user", "login", name, env_extra={**login, "EPOCHAL_PASSWORD": "a-long-password"})
        return login

    def failure_logs(self, lines: int = 40) -> list[tuple[str, str]]:
        """The last `lines` of each of the cluster's logs (its parts', and other agents' beside
        them): what a failed test that used it prints (tests/conftest.py)."""
        logs = [*sorted((self.state_dir / "logs").glob("*.log")),
                *sorted(self.state_dir.glob("*.log"))]
        return [*((path.name, "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
                  for path in logs if path.is_file()),
                *self._unfinished_trial_logs(lines)]

    def _unfinished_trial_logs(self, lines: int) -> list[tuple[str, str]]:
        """The last `lines` of each unfinished trial of the newest experiments, from the API:
        what a trial that hangs was doing. Nothing when the master does not answer."""
        found = []
        try:
            newest = self.get("/experiments", limit=3, orderBy="ORDER_BY_DESC")["experiments"]
            for exp in newest:
                for trial in self.trials(exp["id"]):
                    if trial["state"].removeprefix("STATE_") in TERMINAL_STATES:
                        continue
                    newest_first = self.trial_logs(trial["id"], limit=lines,
                                                   orderBy="ORDER_BY_DESC")
                    text = [line["log"].rstrip("\n") for line in newest_first]
                    found.append((f"trial {trial['id']} ({trial['state']}) log",
                                  "\n".join(reversed(text))))
        except (httpx.HTTPError, KeyError, ValueError) as error:
            found.append(("unfinished trials' logs", f"not read: {error!r}"))
        return found

    @property
    def secrets(self) -> dict[str, str]:
        """The admin password and cluster token `cluster up` made (STATE/secrets.json)."""
        return dict(json.loads((self.state_dir / "secrets.json").read_text()))

    @property
    def headers(self) -> dict[str, str]:
        """Headers of the session `cluster up` logged the CLI in with (admin)."""
        auth = json.loads(Path(self.env["EPOCHAL_AUTH_FILE"]).read_text())
        return {"Authorization": f"Bearer {auth['masters'][self.url]['token']}"}

    @property
    def agent_env(self) -> dict[str, str]:
        """The environment for another agent of this cluster (with the cluster token)."""
        return {**self.env, "EPOCHAL_CLUSTER_TOKEN": self.secrets["cluster_token"]}


# For clusters whose tests kill or cut off an agent: its runs fail after 12 s without a heartbeat
# (and the pool loses it after 6) instead of 30 (and 15), so the trial resumes elsewhere that
# much sooner (common/agent_timeout.py). Runs heartbeat every 2 s, so a busy agent still passes.
FAST_AGENT_TIMEOUT = {"EPOCHAL_AGENT_TIMEOUT_SECONDS": "12"}


@contextmanager
def shared_servers_cluster(
    postgres_url: str, temporal_address: str | None, name: str, *up_args: str,
    env_extra: dict[str, str] | None = None, host: str = "127.0.0.1",
) -> Iterator[Cluster]:
    """`epochal cluster up` (with `up_args`, and `env_extra` in its environment) on the
    session's servers; down and removed after. With `temporal_address` None the cluster runs
    its own Temporal (namespace `default`); `host` is the address it listens on (`--host`)."""
    if temporal_address is not None:
        start_clean(temporal_address)
        temporal = {"EPOCHAL_TEMPORAL_ADDRESS": temporal_address,
                    "EPOCHAL_TEMPORAL_NAMESPACE": E2E_NAMESPACE}
    else:
        temporal_port, ui_port = free_port(host), free_port(host)
        up_args = (*up_args, "--temporal-port", str(temporal_port),
                   "--temporal-ui-port", str(ui_port))
        temporal = {}
    if host != "127.0.0.1":
        up_args = (*up_args, "--host", host)
    state_dir = Path(tempfile.mkdtemp(prefix=f"epochal-{name}-"))
    port = free_port(host)
    url = f"http://{host}:{port}"
    with fresh_database(postgres_url, prefix=f"epochal_{name.replace('-', '_')}") as db_url:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_TEMPORAL_")},
            **temporal,
            "EPOCHAL_DB_URL": db_url,
            "EPOCHAL_STATE_DIR": str(state_dir),
            "EPOCHAL_MASTER": url,
            "EPOCHAL_KILL_GRACE_SECONDS": "3",
            "EPOCHAL_AUTH_FILE": str(state_dir / "auth.json"),
            **(env_extra or {}),
        }
        cluster = Cluster(env, url, state_dir,
                          temporal_address or f"{host}:{temporal_port}",
                          E2E_NAMESPACE if temporal_address else "default")
        try:
            cluster.up = cluster.run("cluster", "up", "--api-port", str(port), *up_args)
            fresh_ids(db_url)
            yield cluster
        finally:
            cluster.run("cluster", "down", check=False)  # and the rules of agents a test killed
            shutil.rmtree(state_dir, ignore_errors=True)



@contextmanager
def docker_runtime_cluster(
    postgres_url: str, temporal_address: str, name: str, slots: int,
    env_extra: dict[str, str] | None = None,
) -> Iterator[Cluster]:
    """A shared-servers cluster whose agent runs trials in task containers."""
    with shared_servers_cluster(postgres_url, temporal_address, name, "--slots", str(slots),
                                "--runtime", "docker", env_extra=env_extra) as cluster:
        assert cluster.up is not None and "docker runtime" in cluster.up.stderr
        yield cluster

class SecondAgent:
    """Another agent of a cluster, started here so that a test can kill it (kill -9); on
    another `host` (a network namespace) if given."""

    def __init__(self, cluster: Cluster, agent_id: str = "agent-2", slots: int = 1,
                 extra_args: tuple[str, ...] = (), host: Host | None = None) -> None:
        self.cluster = cluster
        self.agent_id = agent_id
        self.slots = slots
        self.extra_args = extra_args
        self.host = host
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def work_dir(self) -> Path:
        return self.cluster.state_dir / self.agent_id

    def start(self) -> None:
        log = open(self.cluster.state_dir / f"{self.agent_id}.log", "ab")  # noqa: SIM115
        argv = [sys.executable, "-m", "agent_worker", "--master", self.cluster.url,
                "--temporal", self.cluster.temporal_address,
                "--namespace", self.cluster.temporal_namespace, "--pool", "default",
                "--slots", str(self.slots), "--work-dir", str(self.work_dir),
                "--agent-id", self.agent_id, *self.extra_args]
        self.proc = subprocess.Popen(
            self.host.command(argv) if self.host else argv,
            env=self.cluster.agent_env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        wait_for(lambda: self.alive(), timeout=60, what=f"{self.agent_id} to register")

    def alive(self) -> bool:
        agents = self.cluster.get("/agents")["agents"]
        return any(a["id"] == self.agent_id and a["alive"] for a in agents)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def created_id(output: str) -> int:
    match = re.search(r"Created experiment (\d+)", output)
    assert match, output
    return int(match.group(1))



def script_experiment(cluster: Cluster, directory: Path, name: str, script: str,
                      variables: dict[str, str] | None = None, *,
                      max_length: dict[str, int] | None = None,
                      env_extra: dict[str, str] | None = None) -> int:
    """Create a one-trial experiment that runs `script` (no restarts) with `variables` in its
    environment, as the CLI's logged-in user (`env_extra` for another); its id."""
    model = directory / name
    model.mkdir()
    (model / "train.py").write_text(script)
    searcher: dict[str, Any] = {"name": "single", "metric": "loss"}
    if max_length is not None:
        searcher["max_length"] = max_length
    config = directory / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "name": name, "entrypoint": "python3 train.py", "max_restarts": 0, "searcher": searcher,
        "environment": {"environment_variables": variables or {}}}))
    return created_id(cluster.run("experiment", "create", str(config), str(model),
                                  env_extra=env_extra).stdout)
