"""Providers: how the provisioner (workflows/provisioner.py) starts and stops a pool's agents.

Each provider launches instances that run one agent with a known agent id, lists the instances
it started for its pool (the truth the provisioner acts on: nothing is remembered elsewhere),
and terminates them. Methods block; the activities call them in a thread.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Protocol

from common.agent_args import AgentArgs
from providers.config import AwsProvider, DockerProvider, ProcessProvider, ProviderBase
from wire.provisioning import Instance

# Variables an agent may need from the master's environment: how to reach Temporal.
TEMPORAL_VARIABLES = ("EPOCHAL_TEMPORAL_TLS_CERT", "EPOCHAL_TEMPORAL_TLS_KEY",
                      "EPOCHAL_TEMPORAL_TLS_CA", "EPOCHAL_TEMPORAL_TLS_SERVER_NAME",
                      "EPOCHAL_TEMPORAL_API_KEY", "EPOCHAL_TEMPORAL_TLS")


class ProviderError(RuntimeError):
    """The provider's API or engine refused; the message names the pool and the cause."""


@dataclass(frozen=True)
class AgentSetup:
    """What a provisioned agent needs to join its pool."""

    pool: str
    master_url: str
    temporal_address: str
    namespace: str
    cluster_token: str
    slots: int

    def argv(self, agent_id: str, work_dir: str, extra: list[str]) -> list[str]:
        """The agent's arguments after the program (`python -m agent_worker`), then `extra`
        (the provider config's `agent_args`)."""
        return [*AgentArgs(master=self.master_url, temporal=self.temporal_address,
                           pool=self.pool, namespace=self.namespace, slots=self.slots,
                           agent_id=agent_id, work_dir=work_dir).argv(), *extra]


class Provider(Protocol):
    def launch(self, count: int) -> list[Instance]: ...

    def instances(self) -> list[Instance]: ...

    def terminate(self, instance_ids: list[str]) -> None: ...


def make_provider(config: ProviderBase, setup: AgentSetup, *, state_dir: str) -> Provider:
    if isinstance(config, ProcessProvider):
        from providers.process import ProcessAgents

        return ProcessAgents(config, setup, python=sys.executable, state_dir=state_dir)
    if isinstance(config, DockerProvider):
        from providers.docker import DockerAgents

        return DockerAgents(config, setup)
    if isinstance(config, AwsProvider):
        from providers.aws import Ec2Agents

        return Ec2Agents(config, setup)
    raise ValueError(f"no provider for {type(config).__name__}")
