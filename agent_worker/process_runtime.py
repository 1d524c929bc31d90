"""The process runtime: a trial is a shell command run on the agent's host, in its own session.

The entrypoint runs with `/bin/sh -c` in a new session (so a new process group). Its Python is
the agent's own (first on PATH, with the harness installed) or, with a task environment, the
user's (agent_worker/task_env.py). Stopping a trial signals the whole group: SIGTERM, a grace
period (`EPOCHAL_KILL_GRACE_SECONDS`, default 10 s), then SIGKILL. A run that dies of a
ModuleNotFoundError fails at once, naming the module and the environment: restarting it in the
same environment cannot help.

Determined's client reads its info files, and its trial APIs the clean model copy, at fixed
paths (agent_worker/determined_env.py); where the agent may make mount namespaces (root), each
trial gets one in which its own are bind-mounted there (the model copy read-only), so
concurrent trials never see each other's.

With a task user (a root agent's default, agent_worker/sandbox.py), each run is sandboxed: it
runs as that user, in namespaces of its own that hide the agent's and the cluster's secrets and
every other run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil
from temporalio.exceptions import ApplicationError

import harness
from agent_worker.aio import uninterruptible
from agent_worker.determined_env import (
    DETERMINED_INFO_DIR,
    DETERMINED_MODEL_DIR,
    SHARED_FS_CONTAINER_PATH,
    determined_info_dir,
    determined_model_dir,
)
from agent_worker.logs import pump_lines
from agent_worker.run_cgroups import JOIN_THEN_RUN, RunCgroups
from agent_worker.runtime import ExitStatus, Launch, LogSink, Runtime
from agent_worker.sandbox import (
    ROOT_ENVIRONMENT,
    SandboxPlan,
    TaskUser,
    TaskUserError,
    identity_files,
)
from agent_worker.task_env import HarnessPath, TaskEnvironment
from common.checkpoint_storage import under_any_root

logger = logging.getLogger(__name__)

KILL_GRACE_ENV = "EPOCHAL_KILL_GRACE_SECONDS"
DEFAULT_KILL_GRACE_SECONDS = 10.0


def kill_grace_from_env() -> float:
    raw = os.environ.get(KILL_GRACE_ENV)
    if not raw:
        return DEFAULT_KILL_GRACE_SECONDS
    try:
        value = float(raw)
        if value < 0:
            raise ValueError("negative")
    except ValueError:
        logger.warning("%s=%r is not a number of seconds >= 0; using %s", KILL_GRACE_ENV, raw,
                       DEFAULT_KILL_GRACE_SECONDS)
        return DEFAULT_KILL_GRACE_SECONDS
    return value


def describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code} ({_signal_name(-code)})"
    if code > 128 and code - 128 < signal.NSIG:
        return (f"exited with code {code} (the shell reports a process killed by signal "
                f"{code - 128}, {_signal_name(code - 128)})")
    return f"exited with code {code}"


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _prepend(entry: str, value: str | None) -> str:
    return f"{entry}{os.pathsep}{value}" if value else entry


def group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs. Zombies do not count: where nothing reaps
    orphans (PID 1 of many containers), they stay in the group forever."""
    if not _signal_group(pgid, 0):
        return False
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return True
        except (psutil.Error, OSError):
            continue
    return False


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Only a process that changed its uid can cause this; nothing more can be done.
        logger.warning("no permission to signal process group %s", pgid)
        return False
    return True


# Runs in the trial's new mount namespace: mount its Determined info and its model copy
# (read-only), then become the entrypoint (exec keeps the pid, so the process group is the same).
# A failed mount only costs Determined's code that file, so the trial still runs.
_MOUNT_THEN_RUN = (
    'mount --bind "$1" "$2" || echo "epochal: cannot mount $1 at $2; Determined Core API'
    ' scripts will not find their cluster info" >&2; '
    '{ mount --bind "$3" "$4" && mount -o remount,bind,ro "$4"; } || echo "epochal: cannot'
    ' mount $3 at $4; checkpoints of Determined\'s PyTorchTrial will fail" >&2; '
    '[ -z "$5" ] || mount --bind "$5" "$6" || echo "epochal: cannot mount $5 at $6;'
    ' Determined\'s code will not find its shared_fs checkpoint storage" >&2; '
    'exec /bin/sh -c "$7"'
)
# The line a Python traceback ends with when a process died of an import; launchers prefix
# their workers' lines (Determined's `[rank=0] `, torch's `[rank0]: `) and print a summary after.
_MISSING_MODULE = re.compile(
    r"^(?:\[rank=?\d+\]:? )*ModuleNotFoundError: No module named '([^']+)'")
_STDERR_TAIL_LINES = 60


# What a trial inherits from the agent's environment: an allowlist, so that no secret of the
# agent's (EPOCHAL_CLUSTER_TOKEN, cloud credentials, ...) reaches user code. Anything else a
# trial needs comes from its config's environment_variables, as on Determined.
PASSED_TO_TRIALS = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "LANG", "LANGUAGE", "TMPDIR",
    "LD_LIBRARY_PATH", "CUDA_HOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
})


def agent_variables_for_trials(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k in PASSED_TO_TRIALS or k.startswith("LC_")}


def can_make_mount_namespaces() -> bool:
    """Whether `unshare --mount` works here (root, with CAP_SYS_ADMIN), tried once for real."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("mount"):
        return False
    try:
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _plan_file(launch: Launch) -> Path:
    """Where a sandboxed run's plan waits for it: beside its run directory, root's alone."""
    return launch.run_dir.with_name(launch.run_dir.name + ".sandbox.json")


def closed_ancestor(path: Path) -> Path | None:
    """The outermost directory on the way to `path` (not itself) that others may not enter."""
    for directory in reversed(path.parents):
        try:
            if not directory.stat().st_mode & stat.S_IXOTH:
                return directory
        except OSError:
            return None
    return None


# Where a missing container_path is made in the run's own namespace (its directory, its /tmp),
# never on the host's disk: elsewhere it must exist on the host.
_OWN_MOUNT_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")


def user_binds(launch: Launch, keep: list[Path]) -> tuple[list[tuple[str, str, bool]],
                                                         list[Path]]:
    """The config's `bind_mounts` as the sandbox binds them (source, target, read-only), a
    relative container_path under the working directory as on Determined; and the host paths
    the run keeps where they are instead (a host path bound onto itself, as Determined's
    examples bind /tmp: the host's, not the run's own).

    The sandbox binds them after what the run keeps (its directory, its Python), so one may not
    cover those: that would hide them, or make their mount points in the bound directory."""
    binds, kept = [], []
    for i, mount in enumerate(launch.spec.bind_mounts):
        field = f"bind_mounts[{i}].container_path"
        source = mount.host_path
        target = os.path.normpath(os.path.join(launch.workdir, mount.container_path))
        read_only = mount.read_only
        if source == target and not read_only:
            kept.append(Path(source))
            continue
        covered = [path for path in (launch.run_dir, *keep) if under_any_root(str(path), [target])]
        if covered:
            raise ApplicationError(
                f"{field}: {target} would cover {covered[0]}, which the run needs on this "
                f"agent; the process runtime binds {source} there only onto itself "
                "(container_path equal to host_path, not read-only); name another "
                "container_path, or use the Docker runtime", type="BindMountError",
                non_retryable=True)
        own = (str(launch.run_dir), *_OWN_MOUNT_ROOTS)
        if not under_any_root(target, own) and not os.path.exists(target):
            raise ApplicationError(
                f"{field}: {target} does not exist on this agent, where the process runtime "
                "binds onto the host's own paths; use a path that exists there, one under the "
                "working directory or /tmp, or the Docker runtime",
                type="BindMountError", non_retryable=True)
        binds.append((source, target, read_only))
    return binds, kept


def _shared_fs(launch: Launch) -> tuple[str | None, str | None]:
    """The run's shared_fs checkpoint directory and the host_path it is in (None, None: other
    storage)."""
    storage = launch.spec.checkpoint_storage
    return (storage.directory, storage.host_path) if storage is not None else (None, None)


class ProcessRuntime(Runtime):
    def __init__(
        self,
        *,
        kill_grace_seconds: float | None = None,
        heartbeat_interval: float = 2.0,
        python_bin_dir: Path | None = None,
        output_drain_timeout: float = 5.0,
        task_env: TaskEnvironment | None = None,
        harness_path: HarnessPath | None = None,
        cgroups: RunCgroups | None = None,
        task_user: TaskUser | None = None,
        per_user: bool = False,
        hidden_from_trials: tuple[Path, ...] = (),
        shared_with_trials: tuple[Path, ...] = (),
    ) -> None:
        self.kill_grace_seconds = (
            kill_grace_from_env() if kill_grace_seconds is None else kill_grace_seconds)
        self.heartbeat_interval = heartbeat_interval
        if task_env is not None and harness_path is None:
            raise ValueError("a task environment needs the harness path (HarnessPath.prepare)")
        self.task_env = task_env
        self.harness_path = harness_path
        self.cgroups = cgroups or RunCgroups(None)
        # The interpreter's bin first on PATH (not resolved: a venv's bin/python is a symlink).
        self.python_bin_dir = (task_env.prefix / "bin" if task_env is not None
                               else python_bin_dir or Path(sys.executable).parent)
        self.output_drain_timeout = output_drain_timeout
        self.private_mounts = can_make_mount_namespaces()
        self.mounts_shared_fs = self.private_mounts
        self.task_user = task_user
        self.per_user = per_user and task_user is not None
        self.hidden_from_trials = hidden_from_trials
        self.shared_with_trials = shared_with_trials
        if task_user is not None and not self.private_mounts:
            raise TaskUserError(
                f"cannot run trials as {task_user.name}: the agent cannot make mount "
                "namespaces here (it needs root with CAP_SYS_ADMIN); run it as root, or with "
                "--task-user root where trials may see the agent's secrets")
        # What every sandboxed run keeps of the agent's Python: the same for all its runs.
        self.python_paths = self._python_paths() if task_user is not None else []
        if self.private_mounts:
            os.makedirs(DETERMINED_INFO_DIR, exist_ok=True)
            os.makedirs(DETERMINED_MODEL_DIR, exist_ok=True)
            os.makedirs(SHARED_FS_CONTAINER_PATH, exist_ok=True)
        else:
            logger.warning("cannot make mount namespaces (not root?): Determined's code run "
                           "by the process runtime will not find %s nor %s",
                           DETERMINED_INFO_DIR, DETERMINED_MODEL_DIR)

    @property
    def task_owner(self) -> tuple[int, int] | None:
        if self.task_user is None:
            return None
        return self.task_user.uid, self.task_user.gid

    async def startup(self) -> None:
        """Kill what runs of this agent's previous start left (after a crash)."""
        await asyncio.to_thread(self.cgroups.sweep)

    def describe_environment(self) -> str:
        if self.task_env is not None:
            return self.task_env.describe()
        return f"the agent's own environment (python3 = {self.python_bin_dir / 'python3'})"

    def sandbox_plan(self, launch: Launch) -> SandboxPlan:
        """What the sandbox hides and keeps for this run (agent_worker/sandbox.py); writes the
        account files of an identity the host does not know."""
        user = launch.user or self.task_user
        assert user is not None
        identity = identity_files(user, launch.run_dir, launch.run_dir.with_name(
            launch.run_dir.name + ".etc"))
        hide = list(self.hidden_from_trials)
        if Path.home() != Path("/"):
            hide.append(Path.home())  # the agent user's: CLI logins, cloud credentials
        storage, host = _shared_fs(launch)
        cache = launch.checkpoint_cache
        keep = [launch.run_dir, *self.python_paths, *([Path(storage)] if storage else []),
                *([cache] if cache else []), *self.shared_with_trials]
        # A directory others may not enter (/root, a 0700 temp dir) would stop the task user on
        # its way to what it keeps: it is hidden too, and what is kept bound back into it.
        mounts, kept_as_they_are = user_binds(launch, keep)
        keep.extend(kept_as_they_are)
        hide.extend(closed for path in keep if (closed := closed_ancestor(path)) is not None)
        return SandboxPlan(
            command=launch.entrypoint, cwd=str(launch.workdir),
            env=self.environment(launch), uid=user.uid, gid=user.gid,
            binds=[*((str(source), target, read_only) for source, target, read_only in (
                (determined_info_dir(launch.run_dir), DETERMINED_INFO_DIR, False),
                (determined_model_dir(launch.run_dir), DETERMINED_MODEL_DIR, True),
                *(((Path(host), SHARED_FS_CONTAINER_PATH, False),) if host else ()),
            ) if source.is_dir()), *identity],
            hide=[str(p) for p in hide], keep=[str(p) for p in keep],
            tmp=str(launch.tmp_dir) if launch.tmp_dir.is_dir() else "",
            mounts=mounts)

    def _python_paths(self) -> list[Path]:
        """What running the trial's Python and importing the harness needs: the environment,
        the interpreter it was made from, and the harness (with its fallback packages)."""
        prefix = self.python_bin_dir.parent
        paths = [prefix, Path(sys.prefix), Path(sys.base_prefix).resolve(),
                 Path(harness.__file__).resolve().parent]
        python = prefix / "bin" / "python3"
        if python.exists():
            paths.append(python.resolve().parent.parent)
        if self.harness_path is not None:
            for directory in (self.harness_path.path, self.harness_path.fallback):
                paths.append(directory)
                paths.extend(entry.resolve() for entry in directory.iterdir())
        return paths

    def command(self, launch: Launch, cgroup: Path | None = None,
                plan_file: Path | None = None) -> list[str]:
        """The argv that runs the entrypoint: in `cgroup` when given; in the sandbox whose plan
        is `plan_file`, else in a mount namespace of its own when possible."""
        info_dir = determined_info_dir(launch.run_dir)
        model_dir = determined_model_dir(launch.run_dir)
        if plan_file is not None:
            argv = SandboxPlan.argv(plan_file)
        elif not self.private_mounts or not info_dir.is_dir():
            argv = ["/bin/sh", "-c", launch.entrypoint]
        else:
            storage = _shared_fs(launch)[1] or ""
            argv = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                    _MOUNT_THEN_RUN, "epochal-trial", str(info_dir), DETERMINED_INFO_DIR,
                    str(model_dir), DETERMINED_MODEL_DIR, storage, SHARED_FS_CONTAINER_PATH,
                    launch.entrypoint]
        if cgroup is None:
            return argv
        return ["/bin/sh", "-c", JOIN_THEN_RUN, "epochal-join", str(cgroup), *argv]

    def environment(self, launch: Launch) -> dict[str, str]:
        """The agent's variables trials may see, the launch's, and PATH/PYTHONPATH put first.

        With a task environment, PYTHONPATH holds the working directory and the harness alone,
        and the variables activating it are set."""
        env = agent_variables_for_trials(os.environ)
        user = launch.user or self.task_user
        if user is not None:
            # Its own home: the run's directory, private to it and removed after the run.
            env.update(HOME=str(launch.run_dir), USER=user.name, LOGNAME=user.name)
        env.update(launch.env)
        env["PATH"] = _prepend(str(self.python_bin_dir), env.get("PATH"))
        if self.task_env is None or self.harness_path is None:
            env["PYTHONPATH"] = _prepend(str(launch.workdir), env.get("PYTHONPATH"))
            return env
        env.update(self.task_env.activation())
        env.update(self.harness_path.environment())
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(launch.workdir), str(self.harness_path.path),
                        launch.env.get("PYTHONPATH")) if p)
        return env

    async def run(
        self, launch: Launch, logs: LogSink, heartbeat: Callable[[], None]
    ) -> ExitStatus:
        cgroup = await asyncio.to_thread(self.cgroups.create, launch.name)
        try:
            return await self._run(launch, logs, heartbeat, cgroup)
        finally:
            # The sandbox deletes its plan as it starts; not if it never did.
            _plan_file(launch).unlink(missing_ok=True)
            # Whatever the run started and left behind, setsid grandchildren included.
            left = await uninterruptible(asyncio.to_thread(self.cgroups.kill, cgroup))
            if left:
                logger.info("%s: killed %d processes it left behind", launch, left)

    async def _run(
        self, launch: Launch, logs: LogSink, heartbeat: Callable[[], None],
        cgroup: Path | None,
    ) -> ExitStatus:
        if launch.spec.bind_mounts and self.task_user is None:
            raise ApplicationError(
                "bind_mounts: the process runtime binds them only in its sandbox, and this "
                "agent runs trials unsandboxed as its own user (it is not root, or was given "
                "--task-user root); run the agent as root, or use the Docker runtime",
                type="BindMountError", non_retryable=True)
        if self.task_user is not None:
            plan_file = _plan_file(launch)
            plan = await asyncio.to_thread(self.sandbox_plan, launch)
            await asyncio.to_thread(plan.write, plan_file)
            argv, env = self.command(launch, cgroup, plan_file), dict(ROOT_ENVIRONMENT)
        else:
            argv, env = self.command(launch, cgroup), self.environment(launch)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=launch.workdir,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as err:
            raise ApplicationError(f"cannot start the entrypoint {launch.entrypoint!r}: {err}",
                                   type="EntrypointError", non_retryable=True) from err
        assert proc.stdout is not None and proc.stderr is not None
        pgid = launch.root_pid = proc.pid  # a new session's leader leads its process group
        logger.info("%s: started process group %s: %s", launch, pgid, launch.entrypoint)
        stderr_tail = _TailingSink(logs)
        readers = [
            asyncio.create_task(pump_lines(proc.stdout, "stdout", logs)),
            asyncio.create_task(pump_lines(proc.stderr, "stderr", stderr_tail)),
        ]
        waiter = asyncio.create_task(proc.wait())
        try:
            while True:
                heartbeat()
                done, _ = await asyncio.wait({waiter}, timeout=self.heartbeat_interval)
                # Exited, though what it started may still hold its output open.
                if done or proc.returncode is not None:
                    break
        except asyncio.CancelledError:
            logger.info("%s: cancelled; stopping process group %s", launch, pgid)
            await uninterruptible(self._stop_group(pgid, waiter))
            await uninterruptible(self._settle(proc, waiter, cgroup))
            await uninterruptible(self._drain(readers))
            raise
        # The entrypoint is done; anything it left behind in its group goes with it.
        if await asyncio.to_thread(group_alive, pgid):
            logger.info("%s: killing what the entrypoint left running", launch)
            _signal_group(pgid, signal.SIGKILL)
        code = await self._settle(proc, waiter, cgroup)
        await self._drain(readers)
        missing = stderr_tail.missing_module() if code != 0 else None
        if missing is not None:
            raise ApplicationError(
                f"the entrypoint {launch.entrypoint!r} failed: {self.describe_environment()} "
                f"has no module named {missing!r}; install it there, or point the agent at an "
                "environment that has it (`epochal agent run --task-env DIR`)",
                type="MissingModule", non_retryable=True)
        return ExitStatus(exit_code=code, message=describe_exit(code))

    async def _stop_group(self, pgid: int, waiter: asyncio.Task[int]) -> None:
        """SIGTERM the group, give it the grace period to exit, then SIGKILL what is left."""
        loop = asyncio.get_running_loop()
        if _signal_group(pgid, signal.SIGTERM):
            deadline = loop.time() + self.kill_grace_seconds
            while loop.time() < deadline:
                await asyncio.wait({waiter}, timeout=min(0.1, max(deadline - loop.time(), 0)))
                if waiter.done() and not await asyncio.to_thread(group_alive, pgid):
                    break
        await self._kill_group(pgid)

    async def _settle(self, proc: asyncio.subprocess.Process, waiter: asyncio.Task[int],
                      cgroup: Path | None) -> int:
        """The entrypoint's exit code, once what it left behind in its cgroup is gone too.

        A process that left the group (`setsid`) may hold the output pipes open, and asyncio
        reports the exit only once they close: past the drain timeout, they are closed here.
        """
        await asyncio.to_thread(self.cgroups.kill, cgroup)
        _, pending = await asyncio.wait({waiter}, timeout=self.output_drain_timeout)
        if pending:
            logger.warning("a process that left the run's group holds its output open; "
                           "closing it")
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()
        return await waiter

    async def _kill_group(self, pgid: int) -> None:
        """SIGKILL what is left of the group and wait (a little) for it to be gone."""
        if not await asyncio.to_thread(group_alive, pgid):
            return
        _signal_group(pgid, signal.SIGKILL)
        logger.warning("process group %s did not exit in its %.1f s grace period; killed it",
                       pgid, self.kill_grace_seconds)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 5.0
        while loop.time() < deadline and await asyncio.to_thread(group_alive, pgid):
            await asyncio.sleep(0.02)

    async def _drain(self, readers: list[asyncio.Task[None]]) -> None:
        """Read the output to its end; a process that left the group may hold it open."""
        _, pending = await asyncio.wait(readers, timeout=self.output_drain_timeout)
        for task in pending:
            task.cancel()
        if pending:
            logger.warning("stopped reading output still held open by an escaped process")
        await asyncio.gather(*readers, return_exceptions=True)


class _TailingSink:
    """Passes lines on to the log sink and keeps the last few, to tell why a run died."""

    def __init__(self, sink: LogSink) -> None:
        self._sink = sink
        self._tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)

    def add(self, stdtype: str, line: str) -> None:
        self._sink.add(stdtype, line)
        if line.strip():
            self._tail.append(line.strip())

    def missing_module(self) -> str | None:
        """The module a Python process of the run failed to import, when the last lines of
        its output (those of a run that exited non-zero) show such a traceback."""
        for line in reversed(self._tail):
            match = _MISSING_MODULE.match(line)
            if match:
                return match.group(1)
        return None
