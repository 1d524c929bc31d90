"""A trial run's task container, as data: image, command, environment, mounts, devices and
labels, built from the trial's launch without an engine (so tests need none). The Docker
runtime (agent_worker/docker_runtime.py) creates the container from it.

The run's directory is bind-mounted at `/run/epochal` (its home), so its working directory
(model definition, trial_info.json) is `/run/epochal/workdir` and `../data` is the run's own, as
under Determined's `/run/determined/workdir`; trial_info.json is also read-only at
`/run/epochal/info/trial_info.json`, which `EPOCHAL_TRIAL_INFO` names; Determined's info files
and clean model copy read-only at their fixed paths, shared_fs storage at its host path and at
Determined's (agent_worker/determined_env.py). The container uses the host's network, so the
master URL the agent uses works inside too (and the parts of a trial on several agents reach
each other). So that it cannot read the host's traffic, it runs as an unprivileged uid:gid
(never root; agent_worker/sandbox.py's `container_user_for_agent`) with every capability dropped
(no NET_RAW, NET_ADMIN) and `no-new-privileges` (no set-uid program gives them back). GPU slots
are passed by UUID as NVIDIA device requests. Labels (`ai.epochal.agent-id`,
`ai.epochal.trial-id`, ...) let the agent find its containers again
(agent_worker/docker_engine.py).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
from temporalio.exceptions import ApplicationError

from agent_worker.determined_env import (
    DETERMINED_INFO_DIR,
    DETERMINED_MODEL_DIR,
    SHARED_FS_CONTAINER_PATH,
    determined_info_dir,
    determined_model_dir,
)
from agent_worker.runtime import WORKDIR_NAME, Launch
from agent_worker.sandbox import CONTAINER_USER
from agent_worker.slots import TYPE_CUDA, Slot, gpu_environment
from agent_worker.trial_info import TRIAL_INFO_ENV, TRIAL_INFO_FILE
from common.temporal_names import task_allocation_id
from wire.run_spec import RunSpec
from wire.workflow_io import RunTaskInput

CONTAINER_RUN_DIR = "/run/epochal"
CONTAINER_WORKDIR = f"{CONTAINER_RUN_DIR}/{WORKDIR_NAME}"
CONTAINER_INFO_DIR = "/run/epochal/info"
CONTAINER_TRIAL_INFO = f"{CONTAINER_INFO_DIR}/{TRIAL_INFO_FILE}"

LABEL_PREFIX = "ai.epochal"
LABEL_MANAGED = f"{LABEL_PREFIX}.managed"
LABEL_AGENT = f"{LABEL_PREFIX}.agent-id"
# The master the agent serves: agents of two clusters on one engine may share an id.
LABEL_MASTER = f"{LABEL_PREFIX}.master"
LABEL_EXPERIMENT = f"{LABEL_PREFIX}.experiment-id"
LABEL_TRIAL = f"{LABEL_PREFIX}.trial-id"
LABEL_RUN = f"{LABEL_PREFIX}.trial-run-id"
LABEL_TASK = f"{LABEL_PREFIX}.task-id"
LABEL_ALLOCATION = f"{LABEL_PREFIX}.allocation-id"

PULL_POLICIES = ("missing", "always", "never")

_NAME_BAD = re.compile(r"[^a-zA-Z0-9_.-]")


# -- the container, as data ----------------------------------------------------------------------

@dataclass
class ContainerSpec:
    """Everything `containers.create` gets for one run; built without an engine, so testable."""

    image: str
    name: str
    command: list[str]
    environment: dict[str, str]
    labels: dict[str, str]
    mounts: list[docker.types.Mount]
    device_requests: list[docker.types.DeviceRequest]
    shm_size: int
    user: str  # uid:gid, never root
    force_pull: bool
    memory_limit: str | None = None

    def create_kwargs(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "name": self.name,
            "command": self.command,
            "environment": self.environment,
            "labels": self.labels,
            "mounts": self.mounts,
            "device_requests": self.device_requests or None,
            "shm_size": self.shm_size,
            "mem_limit": self.memory_limit,
            "memswap_limit": self.memory_limit,
            "user": self.user,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "working_dir": CONTAINER_WORKDIR,
            "network_mode": "host",
            # docker-init as PID 1: reaps orphans and passes SIGTERM on (see entrypoint_command).
            "init": True,
            "detach": True,
            "stdin_open": False,
            "tty": False,
        }


def image_for(spec: RunSpec, slots: Sequence[Slot], default: str) -> str:
    """The run's image: its CUDA image when it has a CUDA slot, else its CPU one (the same
    name unless the config gave Determined's `{cpu: ..., cuda: ...}`); none: `default`."""
    return spec.image_for(cuda=any(s.type == TYPE_CUDA for s in slots)) or default


def gpu_device_requests(slots: Sequence[Slot]) -> list[docker.types.DeviceRequest]:
    """One NVIDIA device request naming the run's GPU slots by UUID (none for CPU slots)."""
    uuids = [s.uuid for s in slots if s.type == TYPE_CUDA and s.uuid]
    missing = [s.id for s in slots if s.type == TYPE_CUDA and not s.uuid]
    if missing:
        raise ApplicationError(f"GPU slots {missing} have no UUID to pass to Docker",
                               type="SlotError", non_retryable=True)
    if not uuids:
        return []
    return [docker.types.DeviceRequest(driver="nvidia", device_ids=uuids,
                                       capabilities=[["gpu"]])]


def user_mounts(spec: RunSpec) -> list[docker.types.Mount]:
    """The config's `bind_mounts` (the model checked them, the master held their host side to
    its allowed roots); a relative container_path is under the working directory, as on
    Determined. Docker follows a symbolic link in a host path as root, and a run could have put
    one there pointing at a secret: such a host path is refused."""
    mounts = []
    for i, m in enumerate(spec.bind_mounts):
        host_path = m.host_path
        if os.path.realpath(host_path) != host_path:
            raise ApplicationError(
                f"bind_mounts[{i}].host_path: {host_path} passes through a symbolic link "
                f"(to {os.path.realpath(host_path)}); name the directory it points to",
                type="BindMountError", non_retryable=True)
        mounts.append(docker.types.Mount(
            target=posixpath.join(CONTAINER_WORKDIR, m.container_path), source=host_path,
            type="bind", read_only=m.read_only))
    return mounts


# A FIFO the agent holds open while the run lasts (agent_worker/docker_runtime.py): its reader in
# the container sees its end when the agent dies, and kills what the run left running.
CONTAINER_AGENT_ALIVE = "/run/epochal/agent-alive"
AGENT_ALIVE_FILE = "agent-alive"  # beside the run directory, on the agent's host


def agent_alive_path(launch: Launch) -> Path:
    return launch.run_dir.with_name(f"{launch.run_dir.name}.{AGENT_ALIVE_FILE}")


def entrypoint_command(entrypoint: str) -> list[str]:
    """The entrypoint under `/bin/sh -c`, as the process runtime runs it.

    Stopping sends SIGTERM to PID 1, docker-init, which passes it to the whole process group
    (TINI_KILL_PROCESS_GROUP), as the process runtime signals its group. The shell traps it with a
    no-op, so it outlives its child and reports the child's exit; the training process gets
    SIGTERM with its own disposition (a trap's handler is not inherited). What the run writes
    is its user's alone (umask 077), as in the process runtime's sandbox. A watcher in the
    background waits for the agent's end (EOF on CONTAINER_AGENT_ALIVE) and then kills every
    process of the run: no container goes on writing into a trial that no agent watches.
    """
    alive = CONTAINER_AGENT_ALIVE
    watch = f"[ -p {alive} ] && (read -r _ < {alive}; kill -KILL -1) 2>/dev/null &"
    return ["/bin/sh", "-c", f"trap : TERM\numask 077\n{watch}\n{entrypoint}"]


def container_name(agent_id: str, launch: Launch) -> str:
    inp = launch.input
    if isinstance(inp, RunTaskInput):
        return _NAME_BAD.sub("_", f"epochal-{agent_id}-{task_allocation_id(inp.task_id)}")
    return _NAME_BAD.sub("_", f"epochal-{agent_id}-{inp.experiment_id}.{inp.trial_id}."
                              f"{inp.run_id}")


def container_labels(agent_id: str, launch: Launch, master: str = "") -> dict[str, str]:
    inp = launch.input
    owner = {LABEL_MANAGED: "true", LABEL_AGENT: agent_id, **({LABEL_MASTER: master}
                                                               if master else {})}
    if isinstance(inp, RunTaskInput):
        return {**owner, LABEL_TASK: inp.task_id,
                LABEL_ALLOCATION: task_allocation_id(inp.task_id)}
    task = f"{inp.experiment_id}.{inp.trial_id}"
    return {
        **owner,
        LABEL_EXPERIMENT: str(inp.experiment_id),
        LABEL_TRIAL: str(inp.trial_id),
        LABEL_RUN: str(inp.run_id),
        LABEL_TASK: task,
        LABEL_ALLOCATION: f"{task}.{inp.run_id}",
    }


def container_spec(
    launch: Launch,
    *,
    agent_id: str,
    slots: Sequence[Slot],
    default_image: str,
    force_pull: bool = False,
    user: str = f"{CONTAINER_USER.uid}:{CONTAINER_USER.gid}",
    memory_limit: str | None = None,
    master: str = "",
) -> ContainerSpec:
    """The container for one run: image, mounts, environment, labels, GPUs; it runs as `user`
    (uid:gid), which must not be root."""
    if user.partition(":")[0] in ("0", "root"):
        raise ValueError(f"task containers never run as root, got user {user!r}")
    spec = launch.spec
    by_id = {s.id: s for s in slots}
    run_slots = [by_id[i] for i in launch.slot_ids if i in by_id]
    env = dict(launch.env)
    env["TINI_KILL_PROCESS_GROUP"] = "1"
    env["PYTHONPATH"] = CONTAINER_WORKDIR
    if launch.user is not None:  # an identity the image has no account for: its name, at least
        env.setdefault("USER", launch.user.name)
        env.setdefault("LOGNAME", launch.user.name)
    env.update(gpu_environment(run_slots))
    env.setdefault("HOME", CONTAINER_RUN_DIR)  # an arbitrary uid has no home in the image
    run_dir = str(launch.run_dir)
    mounts = [docker.types.Mount(target=CONTAINER_RUN_DIR, source=run_dir, type="bind")]
    if isinstance(launch.input, RunTaskInput):
        # Its command and variables name its directory by the host's path (Jupyter's files,
        # TensorBoard's event files), which the container's user could not make in the image.
        mounts.append(docker.types.Mount(target=run_dir, source=run_dir, type="bind"))
    else:  # a trial's info (an interactive task has none)
        env[TRIAL_INFO_ENV] = CONTAINER_TRIAL_INFO
        mounts.append(docker.types.Mount(target=CONTAINER_TRIAL_INFO,
                                         source=str(launch.workdir / TRIAL_INFO_FILE),
                                         type="bind", read_only=True))
    det_info = determined_info_dir(launch.run_dir)
    if det_info.is_dir():  # what Determined's Core API reads (agent_worker/determined_env.py)
        mounts.append(docker.types.Mount(target=DETERMINED_INFO_DIR, source=str(det_info),
                                         type="bind", read_only=True))
    model_copy = determined_model_dir(launch.run_dir)
    if model_copy.is_dir():  # what Determined's trial APIs copy into checkpoints
        mounts.append(docker.types.Mount(target=DETERMINED_MODEL_DIR, source=str(model_copy),
                                         type="bind", read_only=True))
    host_path = spec.checkpoint_storage.host_path if spec.checkpoint_storage else None
    if host_path:
        # Same path inside, so the storage path in the trial info holds in the container; and
        # where Determined's code looks for it.
        os.makedirs(host_path, exist_ok=True)
        for target in (str(host_path), SHARED_FS_CONTAINER_PATH):
            mounts.append(docker.types.Mount(target=target, source=str(host_path), type="bind"))
    if launch.checkpoint_cache is not None:  # S3 checkpoints: only the trial's cache
        mounts.append(docker.types.Mount(target=str(launch.checkpoint_cache),
                                         source=str(launch.checkpoint_cache), type="bind"))
    alive = agent_alive_path(launch)
    if alive.exists():
        mounts.append(docker.types.Mount(target=CONTAINER_AGENT_ALIVE, source=str(alive),
                                         type="bind", read_only=True))
    mounts.extend(user_mounts(spec))
    return ContainerSpec(
        image=image_for(spec, run_slots, default_image),
        name=container_name(agent_id, launch),
        command=entrypoint_command(launch.entrypoint),
        environment=env,
        labels=container_labels(agent_id, launch, master),
        mounts=mounts,
        device_requests=gpu_device_requests(run_slots),
        shm_size=spec.shm_size,
        user=user,
        force_pull=force_pull or spec.force_pull_image,
        memory_limit=memory_limit,
    )


