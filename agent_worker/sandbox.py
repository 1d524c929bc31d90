"""The process runtime's sandbox: what a trial sees of the agent's host, and as whom it runs.

A trial is untrusted code. Run by a root agent with a task user (`--task-user`, default
`nobody`), each run starts as `python -I -S agent_worker/sandbox_init.py PLAN` (root, a
clean environment) and gets:

- a mount namespace in which the directories that hold the agent's and the cluster's secrets
  (the agent's work dir with every other run in it, the agent user's home, the cluster's state
  dir) are covered by empty tmpfs mounts, with only what the run needs bound back at the same
  paths: its own run directory, its checkpoint storage, the Python it runs and the harness;
  Determined's info files and model copy are bound at `/run/determined/...` (the model
  read-only);
- a /tmp of its own (a directory beside its run directory, also bound on /var/tmp) and a
  /dev/shm of its own (a tmpfs), so no trial sees another's sockets and files there
  (Determined's launchers put theirs at fixed names) and nothing there outlives the run;
- the config's `bind_mounts`, as Docker would bind them (a relative `container_path` under the
  working directory), bound last; the master holds their host side to its allowed roots, and
  neither side may pass through a symbolic link (a run could point one at a secret);
- a PID namespace with its own /proc, so it sees no process but its own: not the master's or the
  agent's environment, nor other trials' (which run as the same user);
- the task user's uid and gid, no supplementary groups and `no_new_privs`, so no set-uid program
  gives root back.

The sandbox's own process is the namespace's init: it waits for the entrypoint, reaps what it
leaves, and exits with its code; when it exits, the kernel kills whatever is left inside. It
dies with the agent (PR_SET_PDEATHSIG), so a killed agent's runs end with it: nothing goes on
writing into a trial that no agent watches. The
plan (which holds the trial's environment, with its token) is passed in a root-only file, never
on a command line other users could read.

The Docker runtime's task user, the uid:gid its containers run as, is chosen here too
(`container_user_for_agent`).
"""

from __future__ import annotations

import json
import os
import pwd
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent_worker import sandbox_init

DEFAULT_TASK_USER = "nobody"
TASK_USER_ENV = "EPOCHAL_TASK_USER"
# What the root half of the sandbox runs with: nothing of the trial's (LD_PRELOAD, PYTHON*).
ROOT_ENVIRONMENT = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


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


# The Docker runtime's container user where the agent is root and names none: 65534:65534 is
# the kernel's overflow id, Debian's nobody:nogroup (the task image's too), which owns no file
# of the image or of the host; it need not exist on the host (the agent gives it the run's files).
CONTAINER_USER = TaskUser(name="nobody", uid=65534, gid=65534)


def container_user_for_agent(name: str | None, *, euid: int | None = None) -> TaskUser:
    """The user the Docker runtime runs task containers as, never root: `name` (a user of this
    host), else `CONTAINER_USER` for a root agent; an agent that is not root runs them as its own
    user (it cannot give a run's files to another).

    Root is refused: a container on the host's network as root, with Docker's default
    capabilities, could read the host's traffic, the cluster token in it (docs/SECURITY.md)."""
    euid = os.geteuid() if euid is None else euid
    if name == "root":
        raise TaskUserError(
            "--task-user 'root': the Docker runtime runs task containers as an unprivileged "
            "user, never root, which on the host's network could read the cluster's traffic "
            "(docs/SECURITY.md); name an unprivileged user, or drop --task-user for "
            f"{CONTAINER_USER.uid}:{CONTAINER_USER.gid}")
    if euid != 0:
        if name:
            raise TaskUserError(
                f"--task-user {name!r}: giving a run's files to another user needs root, and "
                f"this agent runs as uid {euid}; start it as root, or drop --task-user to run "
                f"task containers as uid {euid}")
        try:
            own = pwd.getpwuid(euid).pw_name
        except KeyError:
            own = str(euid)
        return TaskUser(name=own, uid=euid, gid=os.getegid())
    return TaskUser.named(name) if name else CONTAINER_USER


# Each user's runs have an identity of their own (`--task-user` not given, a root agent): the
# one an admin linked (`det user link-with-agent-user`), else uid and gid RUN_ID_BASE + the user's
# id, which no account of the host has (none is needed), so no two users' runs share files,
# /tmp, processes or the firewall's exceptions. Below 2**31: tools read ids as signed.
RUN_ID_BASE = 2_000_000_000
RUN_ID_SPAN = 100_000_000  # user ids below this; RUN_ID_RANGE is what the firewall closes
RUN_ID_RANGE = f"{RUN_ID_BASE}-{RUN_ID_BASE + RUN_ID_SPAN - 1}"


def user_identity(user_id: int, username: str, link: dict[str, Any] | None) -> TaskUser:
    """Who a user's runs are on this agent: their linked agent user, else their own ids."""
    if link:
        uid, gid = int(link["agentUid"]), int(link["agentGid"])
        if uid <= 0 or gid <= 0:
            raise TaskUserError(f"user {username} is linked with uid {uid}, gid {gid}: runs "
                                "never have root's ids; an admin links another user")
        return TaskUser(name=str(link.get("agentUser") or uid), uid=uid, gid=gid)
    if not 0 < user_id < RUN_ID_SPAN:
        raise TaskUserError(f"user id {user_id} is past the {RUN_ID_SPAN:,} users whose runs "
                            "get ids of their own; an admin links the user with an agent user")
    return TaskUser(name=f"epochal-{username}"[:32], uid=RUN_ID_BASE + user_id,
                    gid=RUN_ID_BASE + user_id)


def identity_files(user: TaskUser, home: Path, directory: Path) -> list[tuple[str, str, bool]]:
    """For an identity this host has no account for: /etc/passwd and /etc/group with it added,
    written in `directory`, as binds (source, target, read-only) onto the real ones, so what
    asks who it is (sshd, `getpass.getuser()`, `id`) finds a name and a home."""
    try:
        pwd.getpwuid(user.uid)
        return []
    except KeyError:
        pass
    from agent_worker.private_files import write_private  # see SandboxPlan.write

    directory.mkdir(mode=0o755, exist_ok=True)
    binds = []
    for name, line in (("passwd", f"{user.name}:x:{user.uid}:{user.gid}:Epochal user:{home}:"
                                  "/bin/sh\n"),
                       ("group", f"{user.name}:x:{user.gid}:\n")):
        source = directory / name
        write_private(source, Path("/etc", name).read_text() + line)
        source.chmod(0o644)
        binds.append((str(source), f"/etc/{name}", True))
    return binds


@dataclass
class SandboxPlan:
    """Everything the sandbox does for one run, written as JSON for its root half
    (agent_worker/sandbox_init.py, which reads these fields)."""

    command: str  # the entrypoint, a shell command line
    cwd: str
    env: dict[str, str]
    uid: int
    gid: int
    binds: list[tuple[str, str, bool]] = field(default_factory=list)  # source, target, read-only
    hide: list[str] = field(default_factory=list)  # covered by an empty tmpfs
    keep: list[str] = field(default_factory=list)  # bound back where they were, when hidden
    tmp: str = ""  # bound on /tmp (with what is kept under /tmp bound back); empty: host's
    # The config's bind_mounts (source, target, read-only), bound last: over the run's own /tmp
    # too, as Docker binds them over the image's. Neither end may pass through a symbolic link.
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    # The agent's pid: the sandbox dies with it (a run whose agent is gone has nobody to stop it).
    agent_pid: int = field(default_factory=os.getpid)

    def write(self, path: Path) -> None:
        # Imported here: this file also runs alone, without the package (see `argv`).
        from agent_worker.private_files import write_private

        write_private(path, json.dumps(asdict(self)))

    @staticmethod
    def argv(plan_file: Path) -> list[str]:
        """The command that runs this plan (as root, with `ROOT_ENVIRONMENT`): the root half
        alone, isolated (-I) and without site packages (-S), so nothing of the trial's is
        imported."""
        return [sys.executable, "-I", "-S", sandbox_init.__file__, str(plan_file)]
