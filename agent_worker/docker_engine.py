"""The Docker engine as the agent uses it: a client, a ping, the agent's own containers (by
label) and their removal, and threads for the SDK's long blocking calls (waiting for an exit,
following logs), which would otherwise hold up asyncio's default executor."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from agent_worker.container_spec import LABEL_AGENT, LABEL_MANAGED, LABEL_MASTER

logger = logging.getLogger(__name__)

T = TypeVar("T")


def default_task_image() -> str:
    """Epochal's task image for the harness this agent has (tag from a content hash)."""
    from task_image.image import task_image_tag

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



def container_state(container: Container) -> dict[str, Any]:
    container.reload()
    state = container.attrs.get("State") or {}
    return dict(state)


def remove_container(container: Container) -> None:
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as err:
        logger.warning("cannot remove container %s: %s", container.name, err)


def api_message(err: docker.errors.DockerException) -> str:
    explanation = getattr(err, "explanation", None)
    return str(explanation or err)


def agent_containers(client: docker.DockerClient, agent_id: str,
                     master: str = "") -> list[Container]:
    """Every container (running or not) labelled as this agent's (of `master`'s cluster, when
    given: another cluster's agent on this engine may have the same id)."""
    labels = [f"{LABEL_MANAGED}=true", f"{LABEL_AGENT}={agent_id}",
              *([f"{LABEL_MASTER}={master}"] if master else [])]
    return list(client.containers.list(all=True, filters={"label": labels}))


def remove_agent_containers(client: docker.DockerClient, agent_id: str,
                            master: str = "") -> list[str]:
    """Kill and remove this agent's containers; their names."""
    names = []
    for c in agent_containers(client, agent_id, master):
        remove_container(c)
        names.append(c.name or c.id or "?")
    return names


