"""The Docker runtime: a trial run is a task container started from the trial's image.

The run directory (model definition, trial_info.json) is bind-mounted at `/run/epochal/workdir`,
the working directory; trial_info.json also read-only at `/run/epochal/info/trial_info.json`,
which `EPOCHAL_TRIAL_INFO` names; Determined's info files and clean model copy read-only at
their fixed paths (agent_worker/determined_env.py). The harness is installed in Epochal's task image
(deploy/images), so a container needs nothing from the agent's host but the run directory, the
checkpoint storage (mounted at the same path, so paths in trial info hold inside) and the
user's `bind_mounts`. The container uses the host's network, so the master URL the agent uses
works inside too. GPU slots are passed by UUID as NVIDIA device requests.

Containers carry labels (`ai.epochal.agent-id`, `ai.epochal.trial-id`, ...): `startup` removes
whatever a crashed agent of the same id left behind. The Docker SDK blocks, so its short calls
run in `asyncio.to_thread` and the long ones (waiting for the exit, following the logs) in
threads of their own, which do not hold up the default executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import docker
import docker.errors
import docker.types
from docker.models.containers import Container
from temporalio.exceptions import ApplicationError

from agent_worker.aio import uninterruptible
from agent_worker.determined_env import (
    DETERMINED_INFO_DIR,
    DETERMINED_MODEL_DIR,
    determined_info_dir,
    determined_model_dir,
)
from agent_worker.process_runtime import describe_exit, kill_grace_from_env
from agent_worker.runtime import ExitStatus, LogSink, Runtime, TrialLaunch
from agent_worker.slots import TYPE_CUDA, Slot, gpu_environment
from agent_worker.trial_info import TRIAL_INFO_ENV, TRIAL_INFO_FILE

logger = logging.getLogger(__name__)

T = TypeVar("T")

CONTAINER_WORKDIR = "/run/epochal/workdir"
CONTAINER_INFO_DIR = "/run/epochal/info"
CONTAINER_TRIAL_INFO = f"{CONTAINER_INFO_DIR}/{TRIAL_INFO_FILE}"
DEFAULT_SHM_SIZE = 4 * 1024**3  # Determined's default for resources.shm_size

LABEL_PREFIX = "ai.epochal"
LABEL_MANAGED = f"{LABEL_PREFIX}.managed"
LABEL_AGENT = f"{LABEL_PREFIX}.agent-id"
LABEL_EXPERIMENT = f"{LABEL_PREFIX}.experiment-id"
LABEL_TRIAL = f"{LABEL_PREFIX}.trial-id"
LABEL_RUN = f"{LABEL_PREFIX}.trial-run-id"
LABEL_TASK = f"{LABEL_PREFIX}.task-id"
LABEL_ALLOCATION = f"{LABEL_PREFIX}.allocation-id"

PULL_POLICIES = ("missing", "always", "never")

_NAME_BAD = re.compile(r"[^a-zA-Z0-9_.-]")


class ImageUnavailable(Exception):
    """The trial's image is neither on this agent nor pullable."""


def default_task_image() -> str:
    """Epochal's task image for the harness this agent has (tag from a content hash)."""
    from deploy.images.task_image import task_image_tag

    return task_image_tag()


def docker_client(timeout: float = 120.0) -> docker.DockerClient:
    """A client for the engine named by DOCKER_HOST (default: the local socket)."""
    return docker.from_env(timeout=int(timeout))


def engine_answers(timeout: float = 3.0) -> bool:
    """Whether a Docker engine answers a ping."""
    try:
        client = docker.from_env(timeout=int(max(timeout, 1)))
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except Exception:  # requests' and docker's errors alike: no engine here
        return False
    finally:
        client.close()


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
    user: str | None
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
            "working_dir": CONTAINER_WORKDIR,
            "network_mode": "host",
            # docker-init as PID 1: reaps orphans and passes SIGTERM on (see entrypoint_command).
            "init": True,
            "detach": True,
            "stdin_open": False,
            "tty": False,
        }


def image_for(config: Mapping[str, Any], slots: Sequence[Slot], default: str) -> str:
    """`environment.image`: a string, or Determined's `{cpu: ..., cuda: ...}` by slot type."""
    image = (config.get("environment") or {}).get("image")
    if isinstance(image, Mapping):
        kind = "cuda" if any(s.type == TYPE_CUDA for s in slots) else "cpu"
        image = image.get(kind) or image.get("cpu")
    if image is None or (isinstance(image, str) and not image.strip()):
        return default
    if not isinstance(image, str):
        raise ApplicationError(
            f"environment.image must be an image name or a mapping of slot type to image "
            f"name, got {image!r}", type="ConfigError", non_retryable=True)
    return image.strip()


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


def shm_size_for(config: Mapping[str, Any]) -> int:
    """`resources.shm_size` in bytes: a number, or a size such as '4G' or '512MiB'."""
    raw = (config.get("resources") or {}).get("shm_size")
    if raw is None:
        return DEFAULT_SHM_SIZE
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return raw
    if isinstance(raw, str):
        m = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)i?b?\s*", raw.lower())
        if m:
            return int(m.group(1)) * int(1024 ** " kmgt".index(m.group(2) or " "))
    raise ApplicationError(f"resources.shm_size must be a size in bytes or like '4G', got {raw!r}",
                           type="ConfigError", non_retryable=True)


def user_mounts(config: Mapping[str, Any]) -> list[docker.types.Mount]:
    """The config's `bind_mounts` (host_path, container_path, read_only)."""
    out = []
    for i, m in enumerate(config.get("bind_mounts") or []):
        if not isinstance(m, Mapping) or not m.get("host_path") or not m.get("container_path"):
            raise ApplicationError(
                f"bind_mounts[{i}] needs host_path and container_path, got {m!r}",
                type="ConfigError", non_retryable=True)
        host, target = str(m["host_path"]), str(m["container_path"])
        if not os.path.isabs(host) or not os.path.isabs(target):
            raise ApplicationError(
                f"bind_mounts[{i}]: host_path and container_path must be absolute paths, got "
                f"{host!r} and {target!r}", type="ConfigError", non_retryable=True)
        out.append(docker.types.Mount(target=target, source=host, type="bind",
                                      read_only=bool(m.get("read_only", False))))
    return out


def entrypoint_command(entrypoint: str) -> list[str]:
    """The entrypoint under `/bin/sh -c`, as the process runtime runs it.

    Stopping sends SIGTERM to PID 1, docker-init, which passes it to the whole process group
    (TINI_KILL_PROCESS_GROUP), as the process runtime signals its group. The shell traps it with a
    no-op, so it outlives its child and reports the child's exit; the training process gets
    SIGTERM with its own disposition (a trap's handler is not inherited).
    """
    return ["/bin/sh", "-c", f"trap : TERM\n{entrypoint}"]


def container_name(agent_id: str, launch: TrialLaunch) -> str:
    inp = launch.input
    return _NAME_BAD.sub("_", f"epochal-{agent_id}-{inp.experiment_id}.{inp.trial_id}."
                              f"{inp.run_id}")


def container_labels(agent_id: str, launch: TrialLaunch) -> dict[str, str]:
    inp = launch.input
    task = f"{inp.experiment_id}.{inp.trial_id}"
    return {
        LABEL_MANAGED: "true",
        LABEL_AGENT: agent_id,
        LABEL_EXPERIMENT: str(inp.experiment_id),
        LABEL_TRIAL: str(inp.trial_id),
        LABEL_RUN: str(inp.run_id),
        LABEL_TASK: task,
        LABEL_ALLOCATION: f"{task}.{inp.run_id}",
    }


def container_spec(
    launch: TrialLaunch,
    *,
    agent_id: str,
    slots: Sequence[Slot],
    default_image: str,
    force_pull: bool = False,
    user: str | None = None,
    memory_limit: str | None = None,
) -> ContainerSpec:
    """The container for one run: image, mounts, environment, labels, GPUs."""
    config = launch.input.config
    by_id = {s.id: s for s in slots}
    run_slots = [by_id[i] for i in launch.slot_ids if i in by_id]
    env = dict(launch.env)
    env["TINI_KILL_PROCESS_GROUP"] = "1"
    env[TRIAL_INFO_ENV] = CONTAINER_TRIAL_INFO
    env["PYTHONPATH"] = CONTAINER_WORKDIR
    env.update(gpu_environment(run_slots))
    if user and not user.startswith("0:"):
        env.setdefault("HOME", "/tmp")  # an arbitrary uid has no home in the image
    run_dir = str(launch.run_dir)
    mounts = [
        docker.types.Mount(target=CONTAINER_WORKDIR, source=run_dir, type="bind"),
        docker.types.Mount(target=CONTAINER_TRIAL_INFO,
                           source=str(launch.run_dir / TRIAL_INFO_FILE), type="bind",
                           read_only=True),
    ]
    det_info = determined_info_dir(launch.run_dir)
    if det_info.is_dir():  # what Determined's Core API reads (agent_worker/determined_env.py)
        mounts.append(docker.types.Mount(target=DETERMINED_INFO_DIR, source=str(det_info),
                                         type="bind", read_only=True))
    model_copy = determined_model_dir(launch.run_dir)
    if model_copy.is_dir():  # what Determined's trial APIs copy into checkpoints
        mounts.append(docker.types.Mount(target=DETERMINED_MODEL_DIR, source=str(model_copy),
                                         type="bind", read_only=True))
    storage = config.get("checkpoint_storage") or {}
    host_path = storage.get("host_path") if storage.get("type") == "shared_fs" else None
    if host_path:
        # Same path inside, so the storage path in the trial info holds in the container.
        os.makedirs(host_path, exist_ok=True)
        mounts.append(docker.types.Mount(target=str(host_path), source=str(host_path),
                                         type="bind"))
    if launch.checkpoint_cache is not None:  # S3 checkpoints: only the trial's cache
        mounts.append(docker.types.Mount(target=str(launch.checkpoint_cache),
                                         source=str(launch.checkpoint_cache), type="bind"))
    mounts.extend(user_mounts(config))
    force_pull = force_pull or bool((config.get("environment") or {}).get("force_pull_image"))
    return ContainerSpec(
        image=image_for(config, run_slots, default_image),
        name=container_name(agent_id, launch),
        command=entrypoint_command(launch.entrypoint),
        environment=env,
        labels=container_labels(agent_id, launch),
        mounts=mounts,
        device_requests=gpu_device_requests(run_slots),
        shm_size=shm_size_for(config),
        user=user,
        force_pull=force_pull,
        memory_limit=memory_limit,
    )


# -- threads -------------------------------------------------------------------------------------

def in_thread(fn: Callable[[], T], name: str) -> asyncio.Future[T]:
    """Run a long blocking call in a daemon thread of its own; its result as a future."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, err: BaseException | None) -> None:
        if fut.done():
            return
        if err is not None:
            fut.set_exception(err)
        else:
            fut.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result = fn()
        except BaseException as err:
            with contextlib.suppress(RuntimeError):  # the loop may be closed already
                loop.call_soon_threadsafe(settle, None, err)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=target, name=name, daemon=True).start()
    return fut


def split_lines(chunks: Iterator[bytes]) -> Iterator[str]:
    """Docker's log chunks as lines (a chunk may hold several lines or part of one)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", errors="replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", errors="replace").rstrip("\r")


# -- the runtime ---------------------------------------------------------------------------------

class DockerRuntime(Runtime):
    def __init__(
        self,
        *,
        agent_id: str,
        slots: Sequence[Slot] = (),
        client: docker.DockerClient | None = None,
        default_image: str | None = None,
        pull_policy: str = "missing",
        kill_grace_seconds: float | None = None,
        heartbeat_interval: float = 2.0,
        run_as_agent_user: bool = True,
        memory_limit: str | None = None,
    ) -> None:
        if pull_policy not in PULL_POLICIES:
            raise ValueError(f"pull policy must be one of {PULL_POLICIES}, got {pull_policy!r}")
        self.agent_id = agent_id
        self.slots = list(slots)
        self._client = client
        self._default_image = default_image
        self.pull_policy = pull_policy
        self.kill_grace_seconds = (
            kill_grace_from_env() if kill_grace_seconds is None else kill_grace_seconds)
        self.heartbeat_interval = heartbeat_interval
        # Files a trial writes (checkpoints) belong to the agent's user, not to root.
        self.user = f"{os.getuid()}:{os.getgid()}" if run_as_agent_user else None
        self.memory_limit = memory_limit  # per container, e.g. "8g"; None: no limit

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client()
        return self._client

    @property
    def default_image(self) -> str:
        if self._default_image is None:
            self._default_image = default_task_image()
        return self._default_image

    def spec(self, launch: TrialLaunch) -> ContainerSpec:
        return container_spec(launch, agent_id=self.agent_id, slots=self.slots,
                              default_image=self.default_image,
                              force_pull=self.pull_policy == "always", user=self.user,
                              memory_limit=self.memory_limit)

    async def startup(self) -> None:
        """Remove the containers a previous run of this agent left (it crashed, or was killed)."""
        removed = await asyncio.to_thread(remove_agent_containers, self.client, self.agent_id)
        if removed:
            logger.warning("removed %d container(s) left by an earlier run of agent %s: %s",
                           len(removed), self.agent_id, ", ".join(removed))

    async def run(
        self, launch: TrialLaunch, logs: LogSink, heartbeat: Callable[[], None]
    ) -> ExitStatus:
        inp = launch.input
        spec = self.spec(launch)
        heartbeat()
        try:
            await asyncio.to_thread(self._ensure_image, spec)
        except ImageUnavailable as err:
            logs.add("stderr", f"ERROR: {err}")  # so the trial's logs say why it did not start
            raise ApplicationError(str(err), type="ImageUnavailable",
                                   non_retryable=True) from None
        container = await asyncio.to_thread(self._create, spec)
        loop = asyncio.get_running_loop()
        readers: list[asyncio.Future[None]] = []
        try:
            await asyncio.to_thread(container.start)
            launch.root_pid = (await asyncio.to_thread(_state, container)).get("Pid") or None
            logger.info("trial %s run %s: started container %s (%s) from %s", inp.trial_id,
                        inp.run_id, spec.name, container.short_id, spec.image)
            for stdtype in ("stdout", "stderr"):
                readers.append(in_thread(
                    lambda st=stdtype: self._follow(container, st, logs, loop),  # type: ignore[misc]
                    f"logs-{spec.name}-{stdtype}"))
            waiter = in_thread(lambda: container.wait(), f"wait-{spec.name}")
            while True:
                heartbeat()
                done, _ = await asyncio.wait({waiter}, timeout=self.heartbeat_interval)
                if done:
                    break
            code = int(waiter.result().get("StatusCode", -1))
            state = await asyncio.to_thread(_state, container)
            await self._drain(readers)
            oom = bool(state.get("OOMKilled"))
            message = describe_exit(code)
            if oom:
                message += " (the container was killed for running out of memory)"
            if state.get("Error"):
                message += f": {state['Error']}"
            return ExitStatus(exit_code=code, message=message, oom_killed=oom)
        except asyncio.CancelledError:
            logger.info("trial %s run %s: cancelled; stopping container %s", inp.trial_id,
                        inp.run_id, spec.name)
            await uninterruptible(asyncio.to_thread(self._stop, container))
            await uninterruptible(self._drain(readers))
            raise
        finally:
            await uninterruptible(asyncio.to_thread(_remove, container))

    def _ensure_image(self, spec: ContainerSpec) -> None:
        """Use the local image; pull only when it is missing (policy `missing`) or when asked
        (`force_pull_image`, policy `always`); never with policy `never`."""
        images = self.client.images
        present = True
        try:
            images.get(spec.image)
        except docker.errors.ImageNotFound:
            present = False
        except docker.errors.APIError as err:
            raise ImageUnavailable(f"cannot look up image {spec.image!r}: {err}") from err
        if present and (not spec.force_pull or self.pull_policy == "never"):
            return
        if self.pull_policy == "never":
            raise ImageUnavailable(
                f"image {spec.image!r} is not on agent {self.agent_id} and the agent does not "
                f"pull images (--image-pull never); build it (epochal image build) or load it")
        try:
            logger.info("pulling image %s", spec.image)
            images.pull(spec.image)
        except docker.errors.DockerException as err:
            where = "is not on this agent and " if not present else ""
            raise ImageUnavailable(
                f"image {spec.image!r} {where}cannot be pulled on agent {self.agent_id}: "
                f"{_api_message(err)}") from err

    def _create(self, spec: ContainerSpec) -> Container:
        # A retried run on this agent may find its earlier container; it goes first.
        with contextlib.suppress(docker.errors.NotFound):
            self.client.containers.get(spec.name).remove(force=True)
        try:
            return self.client.containers.create(**spec.create_kwargs())
        except docker.errors.APIError as err:
            raise ApplicationError(
                f"cannot create the container from image {spec.image!r}: {_api_message(err)}",
                type="ContainerError", non_retryable=True) from err

    def _follow(self, container: Container, stdtype: str, logs: LogSink,
                loop: asyncio.AbstractEventLoop) -> None:
        stream = container.logs(stdout=stdtype == "stdout", stderr=stdtype == "stderr",
                                stream=True, follow=True)
        for line in split_lines(stream):
            loop.call_soon_threadsafe(logs.add, stdtype, line)

    def _stop(self, container: Container) -> None:
        """SIGTERM, the grace period, then SIGKILL (docker stop does exactly that)."""
        try:
            container.stop(timeout=max(int(round(self.kill_grace_seconds)), 0))
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as err:
            logger.warning("cannot stop container %s (%s); killing it", container.name, err)
            with contextlib.suppress(docker.errors.APIError):
                container.kill()

    async def _drain(self, readers: list[asyncio.Future[None]]) -> None:
        if not readers:
            return
        _, pending = await asyncio.wait(readers, timeout=5.0)
        if pending:
            logger.warning("stopped following the output of a container that is gone")
        for r in readers:
            if r.done() and not r.cancelled() and r.exception() is not None:
                logger.warning("following a container's output failed: %r", r.exception())


def _state(container: Container) -> dict[str, Any]:
    container.reload()
    state = container.attrs.get("State") or {}
    return dict(state)


def _remove(container: Container) -> None:
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as err:
        logger.warning("cannot remove container %s: %s", container.name, err)


def _api_message(err: docker.errors.DockerException) -> str:
    explanation = getattr(err, "explanation", None)
    return str(explanation or err)


def agent_containers(client: docker.DockerClient, agent_id: str) -> list[Container]:
    """Every container (running or not) labelled as this agent's."""
    return list(client.containers.list(
        all=True, filters={"label": [f"{LABEL_MANAGED}=true", f"{LABEL_AGENT}={agent_id}"]}))


def remove_agent_containers(client: docker.DockerClient, agent_id: str) -> list[str]:
    """Kill and remove this agent's containers; their names."""
    names = []
    for c in agent_containers(client, agent_id):
        _remove(c)
        names.append(c.name or c.id or "?")
    return names


__all__ = [
    "CONTAINER_TRIAL_INFO", "CONTAINER_WORKDIR", "ContainerSpec", "DockerRuntime",
    "agent_containers", "container_spec", "engine_answers", "gpu_device_requests",
    "remove_agent_containers",
]
