"""The agent's command line, as every launcher builds it: `epochal agent run`, the local
cluster and the provisioner's providers all start `python -m agent_worker` with `argv()`
(agent_worker/main.py parses it). Options left None are the agent's own defaults."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

AGENT_PROGRAM = ("-m", "agent_worker")  # after the Python interpreter


@dataclass(frozen=True)
class AgentArgs:
    master: str
    temporal: str
    pool: str
    namespace: str | None = None
    slots: int | None = None
    work_dir: str | None = None
    agent_id: str | None = None
    runtime: str | None = None
    image_pull: str | None = None
    task_env: str | None = None
    task_user: str | None = None
    hide_from_trials: Sequence[str] = ()
    close_to_trials: Sequence[str] = ()

    def argv(self) -> list[str]:
        """The arguments after the program."""
        argv = ["--master", self.master, "--temporal", self.temporal, "--pool", self.pool]
        for flag, value in (("--namespace", self.namespace), ("--slots", self.slots),
                            ("--work-dir", self.work_dir), ("--agent-id", self.agent_id),
                            ("--runtime", self.runtime), ("--image-pull", self.image_pull),
                            ("--task-env", self.task_env), ("--task-user", self.task_user)):
            if value is not None:
                argv += [flag, str(value)]
        for directory in self.hide_from_trials:
            argv += ["--hide-from-trials", directory]
        for address in self.close_to_trials:
            argv += ["--close-to-trials", address]
        return argv
