"""The `docker` provider: agents as containers on the master's Docker engine, from an image with
Epochal installed (deploy/compose/Dockerfile), labelled with their pool, agent id and launch
time, so the engine's list is the provider's truth."""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

import docker
from docker.errors import DockerException, NotFound
from docker.types import DeviceRequest

from providers import TEMPORAL_VARIABLES, AgentSetup, ProviderError
from providers.config import DockerProvider
from wire.provisioning import Instance

POOL_LABEL = "epochal.provisioner.pool"
AGENT_LABEL = "epochal.provisioner.agent-id"
LAUNCHED_LABEL = "epochal.provisioner.launched-at"
WORK_DIR = "/var/lib/epochal/agent"
STOP_GRACE = 15


class DockerAgents:
    def __init__(self, config: DockerProvider, setup: AgentSetup,
                 client: docker.DockerClient | None = None) -> None:
        self.config = config
        self.setup = setup
        self._client = client

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            try:
                self._client = docker.from_env()
            except DockerException as err:
                raise ProviderError(f"pool {self.setup.pool}: no Docker engine: {err}") from None
        return self._client

    def launch(self, count: int) -> list[Instance]:
        launched = []
        env = {k: v for k, v in os.environ.items() if k in TEMPORAL_VARIABLES}
        env["EPOCHAL_CLUSTER_TOKEN"] = self.setup.cluster_token
        for _ in range(count):
            agent_id = f"{self.setup.pool}-{secrets.token_hex(4)}"
            now = time.time()
            options: dict[str, Any] = {}
            if self.config.gpus:
                options["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
            if self.config.network:
                options["network"] = self.config.network
            try:
                container = self.client.containers.run(
                    self.config.image, self.setup.argv(agent_id, WORK_DIR, self.config.agent_args),
                    entrypoint=self.config.agent_entrypoint, name=f"epochal-agent-{agent_id}",
                    labels={POOL_LABEL: self.setup.pool, AGENT_LABEL: agent_id,
                            LAUNCHED_LABEL: f"{now:.3f}"},
                    environment=env, privileged=self.config.privileged, detach=True,
                    **options)
            except DockerException as err:
                self._remove(f"epochal-agent-{agent_id}")  # created, perhaps, but not started
                raise ProviderError(f"pool {self.setup.pool}: cannot start an agent container "
                                    f"from {self.config.image!r}: {err}") from None
            launched.append(Instance(str(container.id), agent_id, now))
        return launched

    def instances(self) -> list[Instance]:
        try:
            containers = self.client.containers.list(
                all=True, filters={"label": f"{POOL_LABEL}={self.setup.pool}"})
        except DockerException as err:
            raise ProviderError(f"pool {self.setup.pool}: cannot list containers: {err}") from None
        found = []
        for container in containers:
            # Its agent is gone (or never started: a failed launch): clear it away.
            if container.status in ("created", "exited", "dead"):
                self._remove(str(container.id))
                continue
            labels = container.labels
            found.append(Instance(str(container.id), labels.get(AGENT_LABEL, ""),
                                  float(labels.get(LAUNCHED_LABEL, "0"))))
        return found

    def terminate(self, instance_ids: list[str]) -> None:
        for instance_id in instance_ids:
            try:
                container = self.client.containers.get(instance_id)
                if container.labels.get(POOL_LABEL) != self.setup.pool:
                    continue  # not one of ours
                container.stop(timeout=STOP_GRACE)
            except NotFound:
                continue
            except DockerException as err:
                raise ProviderError(f"pool {self.setup.pool}: cannot stop container "
                                    f"{instance_id[:12]}: {err}") from None
            self._remove(instance_id)

    def _remove(self, instance_id: str) -> None:
        """Remove a container by id or name, gone already or not."""
        try:
            self.client.containers.get(instance_id).remove(force=True)
        except NotFound:
            pass
        except DockerException as err:
            raise ProviderError(f"pool {self.setup.pool}: cannot remove container "
                                f"{instance_id[:12]}: {err}") from None
