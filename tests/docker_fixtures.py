"""Session fixtures for the Docker runtime's tests: an engine and Epochal's task image.

In CI (env CI=true) both must be there: `make test` starts dockerd and builds the image first
(deploy/dockerd.py), and a missing engine fails the tests instead of skipping them.
Elsewhere they skip, saying why, when no engine answers. The image is built at most once per
session and only when its content-hash tag is missing.
"""

from __future__ import annotations

from collections.abc import Iterator

import docker
import pytest

from deploy.debian_packages import in_ci


@pytest.fixture(scope="session")
def docker_client() -> Iterator[docker.DockerClient]:
    from agent_worker.docker_engine import docker_client as make_client
    from agent_worker.docker_engine import engine_answers

    if not engine_answers():
        reason = ("no Docker engine answers (start dockerd, or run `python -m "
                  "deploy.dockerd` as root)")
        if in_ci():
            pytest.fail(f"CI runs the Docker tests, but {reason}")
        pytest.skip(reason)
    client = make_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def task_image(docker_client: docker.DockerClient) -> str:
    """The default task image's tag, built here if `make test` did not build it already."""
    from task_image import image as images

    tag = images.task_image_tag()
    if not images.image_exists(docker_client, tag):
        try:
            images.build(docker_client)
        except RuntimeError as err:
            if in_ci():
                raise
            pytest.skip(f"cannot build the task image {tag}: {err}")
    return tag
