"""The sandbox's root half: what runs, as root, between the agent and a trial's entrypoint.

`python -I -S sandbox_init.py PLAN` (agent_worker/sandbox.py writes the plan and says what it
does) makes the run's mount and PID namespaces, covers and binds back directories, becomes
the task user and runs the entrypoint as the namespace's init. It starts for every run, so it
imports only what it uses from the standard library (no dataclasses, pathlib or typing, and
libc from the running process rather than a library search): a fifth of a short trial's
start-up went here otherwise.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any, NoReturn

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


_libc = ctypes.CDLL(None, use_errno=True)  # the C library this interpreter runs on


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


def _bind(source: str, target: str, read_only: bool, recursive: bool = True) -> None:
    _mount(source, target, None, _MS_BIND | (_MS_REC if recursive else 0))
    if read_only:
        _mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY)


def _say(message: str) -> None:
    print(f"epochal sandbox: {message}", file=sys.stderr, flush=True)


_RUN_OWN = ("/var/tmp", "/dev/shm")  # made anew for each run, as /tmp


def _set_up_mounts(plan: dict[str, Any]) -> None:
    """In the new mount and PID namespaces, as root: /proc, Determined's paths, the hiding."""
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    # Opened before anything is covered: a host path under /tmp is bound over the run's own.
    user_mounts = [(_open_user_mount(source), target, read_only)
                   for source, target, read_only in plan.get("mounts", [])]
    for source, target, read_only in plan["binds"]:
        try:
            if os.path.isdir(source):
                os.makedirs(target, exist_ok=True)
            _bind(source, target, read_only)
        except OSError as err:
            # Only Determined's code reads these; the trial may not need them.
            _say(f"cannot make {target} ({err}); Determined's code will not find it")
    hidden = outermost([*(h for h in plan["hide"] if os.path.isdir(h)),
                        *(["/tmp"] if plan["tmp"] else [])])
    # Opened before they are covered, bound back from the open descriptors after.
    kept = {}
    covered = [*hidden, *_RUN_OWN]
    for path in outermost(plan["keep"]):
        if os.path.exists(path) and any(_inside(path, h) for h in covered):
            kept[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
    own_tmp = os.open(plan["tmp"], os.O_PATH | os.O_CLOEXEC) if plan["tmp"] else None
    for directory in hidden:
        if directory == "/tmp" and own_tmp is not None:
            _bind(f"/proc/self/fd/{own_tmp}", "/tmp", read_only=False)
            continue
        _mount("tmpfs", directory, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    # /var/tmp and /dev/shm (POSIX shared memory, DataLoader workers' tensors) of its own: the
    # host's are every run's, and what is left there outlives the run.
    for shared in _RUN_OWN:
        if not os.path.isdir(shared):
            continue
        if shared == "/var/tmp" and own_tmp is not None:
            _bind(f"/proc/self/fd/{own_tmp}", shared, read_only=False)
        else:
            _mount("tmpfs", shared, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    if own_tmp is not None:
        os.close(own_tmp)
    for path, fd in kept.items():
        # A covered directory kept whole (the host's /tmp, bound onto itself) is bound without
        # what now covers it: a recursive bind would take the run's own /tmp along.
        _bind_fd(fd, path, read_only=False, recursive=path not in covered)
        os.close(fd)
    for fd, target, read_only in user_mounts:
        if os.path.realpath(target) != os.path.normpath(target):
            raise OSError(f"bind_mounts: container_path {target} passes through a symbolic "
                          "link")
        _bind_fd(fd, target, read_only)
        os.close(fd)


def _bind_fd(fd: int, target: str, read_only: bool, recursive: bool = True) -> None:
    """Bind what `fd` (an O_PATH descriptor) opened on `target`, made if missing."""
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _bind(f"/proc/self/fd/{fd}", target, read_only, recursive)


def _open_user_mount(source: str) -> int:
    """The host side of one of the config's bind_mounts, opened (O_PATH). Root follows no
    symbolic link on either side (the target is checked as it is bound): a run could have put
    one in a shared host directory (pointing at a secret) or in its own working directory
    (pointing where root would make a directory)."""
    fd = os.open(source, os.O_PATH | os.O_CLOEXEC)
    if os.readlink(f"/proc/self/fd/{fd}") != os.path.normpath(source):
        os.close(fd)
        raise OSError(f"bind_mounts: host_path {source} passes through a symbolic link; name "
                      "the directory it points to")
    return fd


def _drop_privileges(plan: dict[str, Any]) -> None:
    os.setgroups([])
    os.setgid(plan["gid"])
    os.setuid(plan["uid"])
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # as a shell reports a signal's death


def _init(plan: dict[str, Any]) -> NoReturn:
    """PID 1 of the run's namespace: mounts, then the entrypoint as the task user."""
    try:
        _set_up_mounts(plan)
        os.chdir(plan["cwd"])
        _drop_privileges(plan)
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError as err:
        _say(f"cannot set up the trial's sandbox: {err}")
        os._exit(125)
    # The agent stops a run by SIGTERM to its process group, which holds this process too.
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
    entrypoint = os.fork()
    if entrypoint == 0:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        # What the run writes is its user's alone (checkpoints, logs, /tmp): other users' runs
        # have other ids (agent_worker/sandbox.py); the master and the agent, root, still read.
        os.umask(0o077)
        try:
            os.execve("/bin/sh", ["/bin/sh", "-c", plan["command"]], plan["env"])
        except OSError as err:
            _say(f"cannot run /bin/sh: {err}")
            os._exit(127)
    while True:  # reap everything; the entrypoint's end is the run's
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(125)
        if pid == entrypoint:
            if stopping:
                _wait_for_the_group()
            os._exit(_exit_code(status))


def _wait_for_the_group() -> None:
    """Reap what is left of the run's process group before this init's exit ends the namespace.

    The shell that runs the entrypoint dies of SIGTERM at once, while the program it started
    (the same group, so signalled too) may still be handling it: saving a checkpoint, printing
    its last lines. Leaving now would SIGKILL it mid-way. What left the group (setsid) is not
    waited for; the agent's SIGKILL after the grace period bounds the wait.
    """
    while True:
        try:
            os.waitpid(0, 0)
        except ChildProcessError:
            return


def main(argv: list[str]) -> NoReturn:
    if len(argv) != 2:
        _say("usage: python -I -S sandbox_init.py PLAN_FILE")
        os._exit(2)
    # Dies with the agent that started it (its init, then the whole namespace, die with it): a
    # run whose agent is gone has nobody to stop it, report its end or fence its token.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    with open(argv[1], encoding="utf-8") as plan_file:
        plan = json.load(plan_file)
    os.unlink(argv[1])
    if os.getppid() != plan["agent_pid"]:  # the agent died before prctl
        _say("the agent that started this run is gone")
        os._exit(137)
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
