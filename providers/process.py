"""The `process` provider: agents as processes on the master's host, each with its own work
directory STATE/provisioned/<pool>/<agent id>/ (its pid file, log and trials). For tests and
small sites; a host's own agents, not other machines'.

An agent gets a clean environment: how to reach Temporal and the cluster token, never the
master's database URL, storage keys or admin password.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
from pathlib import Path

from common import processes
from common.agent_args import AGENT_PROGRAM
from providers import TEMPORAL_VARIABLES, AgentSetup
from providers.config import ProcessProvider
from wire.provisioning import Instance

PASSED = ("PATH", "HOME", "LANG", "TZ", "PYTHONPATH", "EPOCHAL_TASK_ENV", "EPOCHAL_TASK_USER",
          "EPOCHAL_KILL_GRACE_SECONDS", "EPOCHAL_TRACES_FILE", *TEMPORAL_VARIABLES)
STOP_GRACE = 15.0
PROVISIONED = "provisioned"  # under the master's state directory


def pid_files(state_dir: Path) -> list[Path]:
    """The pid files of the agents the process provider started under `state_dir`."""
    return sorted((state_dir / PROVISIONED).glob("*/*/agent.pid"))


class ProcessAgents:
    def __init__(self, config: ProcessProvider, setup: AgentSetup, *, python: str,
                 state_dir: str) -> None:
        self.config = config
        self.setup = setup
        self.python = python
        self.root = Path(config.work_dir or Path(state_dir) / PROVISIONED) / setup.pool
        # The master's state (secrets, database files) is no trial's business.
        self.hidden = ["--hide-from-trials", str(Path(state_dir).absolute())]

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k in PASSED or k.startswith(("LC_", "OTEL_"))}
        return {**env, "PYTHONUNBUFFERED": "1", "EPOCHAL_CLUSTER_TOKEN": self.setup.cluster_token}

    def launch(self, count: int) -> list[Instance]:
        launched = []
        for _ in range(count):
            agent_id = f"{self.setup.pool}-{secrets.token_hex(4)}"
            home = self.root / agent_id
            home.mkdir(parents=True)
            argv = [self.python, *AGENT_PROGRAM,
                    *self.setup.argv(agent_id, str(home / "work"),
                                     [*self.hidden, *self.config.agent_args])]
            processes.spawn(argv, log_file=home / "agent.log", pid_file=home / "agent.pid",
                            env=self._environment(), cwd=home)
            launched.append(Instance(agent_id, agent_id,
                                     (home / "agent.pid").stat().st_mtime))
        return launched

    def instances(self) -> list[Instance]:
        found: list[Instance] = []
        if not self.root.is_dir():
            return found
        for home in sorted(self.root.iterdir()):
            pid_file = home / "agent.pid"
            if not pid_file.exists():
                continue
            with contextlib.suppress(OSError, ValueError):
                os.waitpid(int(pid_file.read_text()), os.WNOHANG)  # reap an agent that died
            if processes.read_pid(pid_file) is None:  # it died: nothing left to terminate
                shutil.rmtree(home, ignore_errors=True)
                continue
            found.append(Instance(home.name, home.name, pid_file.stat().st_mtime))
        return found

    def terminate(self, instance_ids: list[str]) -> None:
        for instance_id in instance_ids:
            home = self.root / instance_id
            if home.parent != self.root or not home.is_dir():
                continue
            pid = processes.read_pid(home / "agent.pid")
            if pid is not None:  # a frozen agent (stopped, hung) must run to see its SIGTERM
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGCONT)
            processes.stop_pid_file(home / "agent.pid", STOP_GRACE)
            shutil.rmtree(home, ignore_errors=True)
