"""The seam between a prepared run and what executes it (a process or a Docker container).

The `run_trial` activity prepares a trial's run (working directory, model definition, trial
info, environment, log shipper), `run_task` an interactive task's, and each hands it to a
`Runtime`, which runs the entrypoint to its end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from agent_worker.sandbox import TaskUser
from wire.run_spec import RunSpec
from wire.workflow_io import RunTaskInput, RunTrialInput

WORKDIR_NAME = "workdir"  # as Determined names it (/run/determined/workdir)


class LogSink(Protocol):
    def add(self, stdtype: str, line: str) -> None:
        """Take one line of the trial's output; must not block."""


@dataclass
class Launch:
    """One prepared run of a trial or of an interactive task.

    `run_dir` is the run's own directory, private to it and removed after it: its home, and
    the parent of its working directory `workdir` (the extracted model definition and
    trial_info.json, or a task's context files). As on Determined, whose working directory is
    `/run/determined/workdir`, a path that climbs out of it (`../data`) lands where the run may
    write, and no other run sees. `spec` is what the run is, built from its config by the
    master's builder (wire/run_spec.py): the runtimes read nothing else of the config."""

    input: RunTrialInput | RunTaskInput
    spec: RunSpec
    run_dir: Path
    entrypoint: str  # a shell command line
    env: dict[str, str]  # added to the runtime's own environment (EPOCHAL_*, the user's)
    slot_ids: list[int] = field(default_factory=list)
    # The run's first process on this host, once the runtime started it (system metrics
    # sample it and what it starts).
    root_pid: int | None = None
    # An interactive task's service: the host:port it listens on (None: a trial, a command).
    service: str | None = None
    # Who the run is on this host: its owner's own identity (agent_worker/sandbox.py); None:
    # the runtime's task user.
    user: TaskUser | None = None
    # Ports of this host the run listens on (its service, its rendezvous as the chief): closed
    # to other users' runs while it lasts.
    ports: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        """Unique among the agent's runs: cgroups and containers are named after it."""
        if isinstance(self.input, RunTaskInput):
            return f"task-{self.input.task_id}"
        return f"trial-{self.input.trial_id}-run-{self.input.run_id}"

    def __str__(self) -> str:
        """For the agent's log lines: "trial 5 run 2", "task 0b1c..."."""
        if isinstance(self.input, RunTaskInput):
            return f"task {self.input.task_id}"
        return f"trial {self.input.trial_id} run {self.input.run_id}"

    @property
    def workdir(self) -> Path:
        """The working directory: the model definition or the task's files."""
        return run_workdir(self.run_dir)

    @property
    def tmp_dir(self) -> Path:
        """The run's own /tmp, beside its directory (the sandbox binds it there)."""
        return run_tmp_dir(self.run_dir)


    @property
    def checkpoint_cache(self) -> Path | None:
        """The trial's S3 checkpoint cache on this agent (kept across its runs), if it uses S3."""
        storage = self.spec.checkpoint_storage
        return checkpoint_cache_dir(self.run_dir) if storage is not None and storage.s3 else None


def run_workdir(run_dir: Path) -> Path:
    return run_dir / WORKDIR_NAME


def run_tmp_dir(run_dir: Path) -> Path:
    return run_dir.with_name(run_dir.name + ".tmp")


def checkpoint_cache_dir(run_dir: Path) -> Path:
    """Beside the trial's runs: the trial's alone, as its runs' directories are."""
    return run_dir.parent / "checkpoint-cache"


@dataclass
class ExitStatus:
    exit_code: int  # negative: killed by that signal
    message: str = ""
    oom_killed: bool = False


class Runtime(ABC):
    # Whether each user's runs get an identity of their own (a root agent given no task user).
    per_user: bool = False
    # Whether runs see shared_fs storage at Determined's path as well as at its host path
    # (agent_worker/determined_env.py).
    mounts_shared_fs: bool = False

    @property
    def task_owner(self) -> tuple[int, int] | None:
        """The uid and gid trials run as when not the agent's: a run's files are given to it."""
        return None

    def owner_of(self, launch: Launch) -> tuple[int, int] | None:
        """The uid and gid this run's files are given to (None: the agent's own)."""
        if launch.user is not None:
            return launch.user.uid, launch.user.gid
        return self.task_owner

    async def startup(self) -> None:
        """Called once when the agent starts, before it takes runs: clean up what a previous,
        crashed run of the same agent left (the Docker runtime's containers)."""
        return None

    @abstractmethod
    async def run(
        self, launch: Launch, logs: LogSink, heartbeat: Callable[[], None]
    ) -> ExitStatus:
        """Run the entrypoint to its end, sending its output to `logs`.

        Calls `heartbeat` every few seconds while it runs (this is how the activity's
        cancellation is delivered). On cancellation (asyncio.CancelledError) it stops the
        trial, all its processes, and re-raises. Raises `ApplicationError` when the trial
        cannot be started.
        """
