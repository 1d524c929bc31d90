"""The process runtime's sandbox: what a trial sees of the agent's host, and as whom it runs.

A trial is untrusted code. Run by a root agent with a task user (`--task-user`, default
`nobody`), each run starts as `python -I -S agent_worker/sandbox.py PLAN` (root, a clean
environment) and gets:

- a mount namespace in which the directories that hold the agent's and the cluster's secrets
  (the agent's work dir with every other run in it, the agent user's home, the cluster's state
  dir) are covered by empty tmpfs mounts, with only what the run needs bound back at the same
  paths: its own run directory, its checkpoint storage, the Python it runs and the harness;
  Determined's info files and model copy are bound at `/run/determined/...` (the model
  read-only);
- a /tmp of its own (a directory beside its run directory), so no trial sees another's
  sockets and files there (Determined's launchers put theirs at fixed names);
- a PID namespace with its own /proc, so it sees no process but its own: not the master's or the
  agent's environment, nor other trials' (which run as the same user);
- the task user's uid and gid, no supplementary groups and `no_new_privs`, so no set-uid program
  gives root back.

The sandbox's own process is the namespace's init: it waits for the entrypoint, reaps what it
leaves, and exits with its code; when it exits, the kernel kills whatever is left inside. The
plan (which holds the trial's environment, with its token) is passed in a root-only file, never
on a command line other users could read.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import pwd
import signal
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NoReturn

DEFAULT_TASK_USER = "nobody"
TASK_USER_ENV = "EPOCHAL_TASK_USER"
# What the root half of the sandbox runs with: nothing of the trial's (LD_PRELOAD, PYTHON*).
ROOT_ENVIRONMENT = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

_CLONE_NEWNS = 0x00020000
_CLONE_NEWPID = 0x20000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1


class TaskUserError(Exception):
    """The agent cannot run trials as the task user it was given."""


@dataclass(frozen=True)
class TaskUser:
    """The unprivileged user a root agent runs trials as."""

    name: str
    uid: int
    gid: int

    @classmethod
    def named(cls, name: str) -> TaskUser:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise TaskUserError(
                f"--task-user {name!r}: no such user on this host; create it (useradd "
                f"--system {name}) or name another") from None
        if entry.pw_uid == 0:
            raise TaskUserError(f"--task-user {name!r} is root: trials would read every secret "
                                "of this host; name an unprivileged user")
        return cls(name=name, uid=entry.pw_uid, gid=entry.pw_gid)


def task_user_for_agent(name: str | None, *, euid: int | None = None) -> TaskUser | None:
    """The task user an agent runs trials as: `name`, else `nobody` for a root agent; None
    (trials run as the agent's own user) for an agent that is not root and names no user.

    `name` "root" runs trials as root, unsandboxed: only for hosts that run one user's work."""
    euid = os.geteuid() if euid is None else euid
    if name == "root":
        return None
    if euid != 0:
        if name:
            raise TaskUserError(
                f"--task-user {name!r}: switching users needs root, and this agent runs as "
                f"uid {euid}; start it as root, or drop --task-user to run trials as uid {euid}")
        return None
    return TaskUser.named(name or DEFAULT_TASK_USER)


@dataclass
class SandboxPlan:
    """Everything the sandbox does for one run, written as JSON for its root half."""

    command: str  # the entrypoint, a shell command line
    cwd: str
    env: dict[str, str]
    uid: int
    gid: int
    binds: list[tuple[str, str, bool]] = field(default_factory=list)  # source, target, read-only
    hide: list[str] = field(default_factory=list)  # covered by an empty tmpfs
    keep: list[str] = field(default_factory=list)  # bound back where they were, when hidden
    tmp: str = ""  # bound on /tmp (with what is kept under /tmp bound back); empty: host's

    def write(self, path: Path) -> None:
        # Imported here: this file also runs alone, without the package (see `argv`).
        from agent_worker.private_files import write_private

        write_private(path, json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path) -> SandboxPlan:
        data = json.loads(path.read_text("utf-8"))
        data["binds"] = [tuple(b) for b in data["binds"]]
        return cls(**data)

    @staticmethod
    def argv(plan_file: Path) -> list[str]:
        """The command that runs this plan (as root, with `ROOT_ENVIRONMENT`): this file alone,
        isolated (-I) and without site packages (-S), so nothing of the trial's is imported."""
        return [sys.executable, "-I", "-S", __file__, str(plan_file)]


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths that are not inside another of them (covering those covers the rest)."""
    unique = sorted({os.path.normpath(p) for p in paths if p and os.path.isabs(p)})
    kept: list[str] = []
    for path in unique:
        if not any(_inside(path, other) for other in kept):
            kept.append(path)
    return kept


def _inside(path: str, directory: str) -> bool:
    return directory == "/" or path == directory or path.startswith(directory.rstrip("/") + "/")


# -- the root half, run as `python -I -S sandbox.py PLAN` ----------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {source or fstype} on {target}")


def _bind(source: str, target: str, read_only: bool) -> None:
    _mount(source, target, None, _MS_BIND | _MS_REC)
    if read_only:
        _mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)


def _say(message: str) -> None:
    print(f"epochal sandbox: {message}", file=sys.stderr, flush=True)


def _set_up_mounts(plan: SandboxPlan) -> None:
    """In the new mount and PID namespaces, as root: /proc, Determined's paths, the hiding."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for source, target, read_only in plan.binds:
        try:
            os.makedirs(target, exist_ok=True)
            _bind(source, target, read_only)
        except OSError as err:
            # Only Determined's code reads these; the trial may not need them.
            _say(f"cannot make {target} ({err}); Determined's code will not find it")
    hidden = outermost([*(h for h in plan.hide if os.path.isdir(h)),
                        *(["/tmp"] if plan.tmp else [])])
    # Opened before they are covered, bound back from the open descriptors after.
    kept = {}
    for path in outermost(plan.keep):
        if os.path.exists(path) and any(_inside(path, h) for h in hidden):
            kept[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
    own_tmp = os.open(plan.tmp, os.O_PATH | os.O_CLOEXEC) if plan.tmp else None
    for directory in hidden:
        if directory == "/tmp" and own_tmp is not None:
            _bind(f"/proc/self/fd/{own_tmp}", "/tmp", read_only=False)
            os.close(own_tmp)
            continue
        _mount("tmpfs", directory, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    for path, fd in kept.items():
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "a").close()
        _bind(f"/proc/self/fd/{fd}", path, read_only=False)
        os.close(fd)


def _drop_privileges(plan: SandboxPlan) -> None:
    os.setgroups([])
    os.setgid(plan.gid)
    os.setuid(plan.uid)
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # as a shell reports a signal's death


def _init(plan: SandboxPlan) -> NoReturn:
    """PID 1 of the run's namespace: mounts, then the entrypoint as the task user."""
    try:
        _set_up_mounts(plan)
        os.chdir(plan.cwd)
        _drop_privileges(plan)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError as err:
        _say(f"cannot set up the trial's sandbox: {err}")
        os._exit(125)
    entrypoint = os.fork()
    if entrypoint == 0:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execve("/bin/sh", ["/bin/sh", "-c", plan.command], plan.env)
        except OSError as err:
            _say(f"cannot run /bin/sh: {err}")
            os._exit(127)
    while True:  # reap everything; the entrypoint's end is the run's
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(125)
        if pid == entrypoint:
            os._exit(_exit_code(status))


def main(argv: list[str]) -> NoReturn:
    if len(argv) != 2:
        _say("usage: python -I -S sandbox.py PLAN_FILE")
        os._exit(2)
    plan_file = Path(argv[1])
    plan = SandboxPlan.read(plan_file)
    plan_file.unlink()
    # The run's signals are for the entrypoint (same process group); this process only waits.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        _check(_libc.unshare(_CLONE_NEWNS | _CLONE_NEWPID), "unshare")
    except OSError as err:
        _say(f"cannot make the trial's namespaces: {err}")
        os._exit(125)
    init = os.fork()
    if init == 0:
        _init(plan)
    _, status = os.waitpid(init, 0)
    os._exit(_exit_code(status))


if __name__ == "__main__":
    main(sys.argv)
