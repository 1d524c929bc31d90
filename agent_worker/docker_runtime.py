"""The Docker runtime: a trial run is a task container started from the trial's image.

The container is described by agent_worker/container_spec.py; this module pulls its image (by the
agent's pull policy), creates and starts it, ships its output as trial logs, stops it with the
kill grace, and removes it. The harness is installed in Epochal's task image (task_image),
so a container needs nothing from the agent's host but the run directory, the checkpoint
storage (mounted at the same path, so paths in trial info hold inside) and the user's
`bind_mounts`. `startup` removes whatever a crashed agent of the same id left behind.

Containers run as the agent's task user, never root (65534:65534 by default for a root agent),
without capabilities: the run's files, and checkpoint storage the agent makes, are given to that
user as the process runtime gives them to its own (`task_owner`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Sequence

import docker
import docker.errors
import docker.types
from docker.models.containers import Container
from temporalio.exceptions import ApplicationError

from agent_worker.aio import uninterruptible
from agent_worker.container_spec import (
    PULL_POLICIES,
    ContainerSpec,
    agent_alive_path,
    container_spec,
)
from agent_worker.docker_engine import (
    api_message,
    container_state,
    default_task_image,
    docker_client,
    in_thread,
    remove_agent_containers,
    remove_container,
    split_lines,
)
from agent_worker.process_runtime import describe_exit, kill_grace_from_env
from agent_worker.runtime import ExitStatus, Launch, LogSink, Runtime
from agent_worker.sandbox import TaskUser, TaskUserError, container_user_for_agent
from agent_worker.slots import Slot

logger = logging.getLogger(__name__)

class ImageUnavailable(Exception):
    """The trial's image is neither on this agent nor pullable."""



# -- the runtime ---------------------------------------------------------------------------------

class DockerRuntime(Runtime):
    mounts_shared_fs = True  # agent_worker/container_spec.py

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
        task_user: TaskUser | None = None,
        per_user: bool = False,
        memory_limit: str | None = None,
        master_url: str = "",
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
        # None: this agent's default (agent_worker/sandbox.py), never root.
        self.task_user = task_user or container_user_for_agent(None)
        if self.task_user.uid == 0:
            raise TaskUserError(f"task containers never run as root ({self.task_user.name})")
        self.user = f"{self.task_user.uid}:{self.task_user.gid}"
        self.per_user = per_user and os.geteuid() == 0
        self.master_url = master_url  # labels its containers: see container_spec.LABEL_MASTER
        self.memory_limit = memory_limit  # per container, e.g. "8g"; None: no limit

    @property
    def task_owner(self) -> tuple[int, int] | None:
        """The containers' uid and gid where they are not the agent's own."""
        owner = (self.task_user.uid, self.task_user.gid)
        return None if owner == (os.geteuid(), os.getegid()) else owner

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

    def spec(self, launch: Launch) -> ContainerSpec:
        return container_spec(launch, agent_id=self.agent_id, slots=self.slots,
                              default_image=self.default_image,
                              force_pull=self.pull_policy == "always",
                              user=(f"{launch.user.uid}:{launch.user.gid}" if launch.user
                                    else self.user),
                              memory_limit=self.memory_limit, master=self.master_url)

    async def startup(self) -> None:
        """Remove the containers a previous run of this agent left (it crashed, or was killed)."""
        removed = await asyncio.to_thread(remove_agent_containers, self.client, self.agent_id,
                                          self.master_url)
        if removed:
            logger.warning("removed %d container(s) left by an earlier run of agent %s: %s",
                           len(removed), self.agent_id, ", ".join(removed))

    async def run(
        self, launch: Launch, logs: LogSink, heartbeat: Callable[[], None]
    ) -> ExitStatus:
        alive = await asyncio.to_thread(self._hold_alive, launch)
        try:
            return await self._run(launch, logs, heartbeat)
        finally:
            os.close(alive)
            agent_alive_path(launch).unlink(missing_ok=True)

    def _hold_alive(self, launch: Launch) -> int:
        """The FIFO the run's container watches (container_spec.entrypoint_command), held open
        by this process: its end, a kill -9 included, is the container's."""
        path = agent_alive_path(launch)
        path.unlink(missing_ok=True)
        os.mkfifo(path, 0o600)
        owner = self.owner_of(launch)
        if owner is not None:
            os.chown(path, *owner)
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)  # a writer, never writing

    async def _run(
        self, launch: Launch, logs: LogSink, heartbeat: Callable[[], None]
    ) -> ExitStatus:
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
            started = await asyncio.to_thread(container_state, container)
            launch.root_pid = started.get("Pid") or None
            logger.info("%s: started container %s (%s) from %s", launch, spec.name,
                        container.short_id, spec.image)
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
            state = await asyncio.to_thread(container_state, container)
            await self._drain(readers)
            oom = bool(state.get("OOMKilled"))
            message = describe_exit(code)
            if oom:
                message += " (the container was killed for running out of memory)"
            if state.get("Error"):
                message += f": {state['Error']}"
            return ExitStatus(exit_code=code, message=message, oom_killed=oom)
        except asyncio.CancelledError:
            logger.info("%s: cancelled; stopping container %s", launch, spec.name)
            await uninterruptible(asyncio.to_thread(self._stop, container))
            await uninterruptible(self._drain(readers))
            raise
        finally:
            await uninterruptible(asyncio.to_thread(remove_container, container))

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
                f"{api_message(err)}") from err

    def _create(self, spec: ContainerSpec) -> Container:
        # A retried run on this agent may find its earlier container; it goes first.
        with contextlib.suppress(docker.errors.NotFound):
            self.client.containers.get(spec.name).remove(force=True)
        try:
            return self.client.containers.create(**spec.create_kwargs())
        except docker.errors.APIError as err:
            raise ApplicationError(
                f"cannot create the container from image {spec.image!r}: {api_message(err)}",
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


