"""The provisioner's activities (workflows/provisioner.py), on the master's queue: what a pool
looks like (its provider's instances, its scheduler's agents and queue), and the provider's
launches and terminations. Providers come from the master's config (providers/config.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from common.temporal_names import (
    PROVISIONER_LAUNCH,
    PROVISIONER_OBSERVE,
    PROVISIONER_SET_ENABLED,
    PROVISIONER_TERMINATE,
    PoolMessages,
    resource_pool_workflow_id,
)
from providers import Provider, ProviderError
from providers.config import ProviderBase
from wire.pools import AgentEnabled
from wire.provisioning import (
    AgentView,
    EnableRequest,
    LaunchRequest,
    Observation,
    TerminateRequest,
)

log = logging.getLogger("epochal.provisioner")


class ProvisioningActivities:
    def __init__(self, client: Client,
                 providers: dict[str, tuple[ProviderBase, Provider]]) -> None:
        self._client = client
        self._providers = providers

    def all(self) -> list[Callable[..., Any]]:
        return [self.observe, self.launch, self.terminate, self.set_enabled]

    def _provider(self, pool: str) -> Provider:
        try:
            return self._providers[pool][1]
        except KeyError:
            raise ApplicationError(f"pool {pool} has no provider", non_retryable=True) from None

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except ProviderError as err:
            log.error("%s", err)
            raise ApplicationError(str(err), type="ProviderError") from None

    @activity.defn(name=PROVISIONER_OBSERVE)
    async def observe(self, pool: str) -> Observation | None:
        if pool not in self._providers:
            return None
        config, provider = self._providers[pool]
        instances = await self._call(provider.instances)
        state = await self._client.get_workflow_handle(resource_pool_workflow_id(pool)).query(
            PoolMessages.DESCRIBE)
        agents = [AgentView(a["id"], bool(a["alive"]), bool(a["enabled"]),
                            bool(a["allocations"])) for a in state["agents"]]
        return Observation(config.limits(), instances, agents,
                           [int(r["slots"]) for r in state["queue"]])

    @activity.defn(name=PROVISIONER_LAUNCH)
    async def launch(self, request: LaunchRequest) -> list[str]:
        launched = await self._call(self._provider(request.pool).launch, request.count)
        log.info("pool %s: launched %s", request.pool,
                 ", ".join(i.agent_id for i in launched))
        return [i.agent_id for i in launched]

    @activity.defn(name=PROVISIONER_TERMINATE)
    async def terminate(self, request: TerminateRequest) -> None:
        log.info("pool %s: terminating %s (%s)", request.pool, ", ".join(request.instance_ids),
                 request.reason)
        await self._call(self._provider(request.pool).terminate, request.instance_ids)

    @activity.defn(name=PROVISIONER_SET_ENABLED)
    async def set_enabled(self, request: EnableRequest) -> None:
        handle = self._client.get_workflow_handle(resource_pool_workflow_id(request.pool))
        for agent_id in request.agent_ids:
            await handle.signal(PoolMessages.SET_AGENT_ENABLED,
                                AgentEnabled(agent_id, request.enabled))
        log.info("pool %s: %s %s", request.pool,
                 "keeping" if request.enabled else "draining idle agent(s)",
                 ", ".join(request.agent_ids))
