"""The master process: schema migrations, then the REST API and the Temporal worker in one loop.

The worker hosts the experiment and trial workflows, the resource pools' schedulers
(`ResourcePoolWorkflow`, one per pool named in EPOCHAL_RESOURCE_POOLS, started here idempotently)
and the activities that write PostgreSQL or talk to the schedulers.
Everything durable lives in Temporal and PostgreSQL, so this process can be killed and restarted
at any moment.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import uvicorn
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

from activities.database import apply_migrations, create_pool
from activities.experiment_store import ExperimentStore
from activities.scheduler import SchedulerActivities
from api.app import create_app
from api.auth import ensure_admin_password
from api.settings import Settings
from common import tracing
from common.temporal_names import MASTER_TASK_QUEUE, resource_pool_workflow_id
from workflows.experiment import ExperimentWorkflow
from workflows.pool_types import PoolInput
from workflows.resource_pool import ResourcePoolWorkflow
from workflows.trial import TrialWorkflow

log = logging.getLogger("epochal.master")
T = TypeVar("T")
CONNECT_ATTEMPTS = 60


async def _retry(what: str, connect: Callable[[], Awaitable[T]]) -> T:
    """The database and Temporal may still be starting: wait for them, a minute at most."""
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            return await connect()
        except (OSError, asyncpg.PostgresError, RuntimeError) as err:
            if attempt == CONNECT_ATTEMPTS:
                raise
            log.warning("%s not reachable yet (%s); retrying", what, err)
            await asyncio.sleep(1)
    raise AssertionError("unreachable")


def build_worker(client: Client, pool: asyncpg.Pool, *,
                 cluster_storage: dict[str, Any] | None = None, **options: Any) -> Worker:
    """The master's worker; tests pass Worker options (e.g. `max_cached_workflows=0`, which
    replays every workflow task from history, as a restarted worker does)."""
    return Worker(
        client,
        task_queue=MASTER_TASK_QUEUE,
        workflows=[ExperimentWorkflow, TrialWorkflow, ResourcePoolWorkflow],
        activities=[*ExperimentStore(pool, cluster_storage).all(),
                    *SchedulerActivities(client).all()],
        **options,
    )


async def start_resource_pools(client: Client, names: tuple[str, ...]) -> None:
    """Start each pool's scheduler unless it runs already (a restart finds them running)."""
    for name in names:
        await client.start_workflow(
            ResourcePoolWorkflow.run,
            PoolInput(name=name),
            id=resource_pool_workflow_id(name),
            task_queue=MASTER_TASK_QUEUE,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )


POOL_GAUGE_INTERVAL = 10.0


async def report_pool_gauges(client: Client, pools: tuple[str, ...]) -> None:
    """With tracing on: each pool's queue length and slots used and offered, as OpenTelemetry
    gauges (`epochal.pool.queue_length`, `epochal.pool.slots_used`, `epochal.pool.slots`),
    read from the pool workflows every POOL_GAUGE_INTERVAL seconds."""
    while True:
        queued: dict[tuple[tuple[str, str], ...], float] = {}
        used: dict[tuple[tuple[str, str], ...], float] = {}
        offered: dict[tuple[tuple[str, str], ...], float] = {}
        for name in pools:
            try:
                state = await client.get_workflow_handle(resource_pool_workflow_id(name)).query(
                    "describe")
            except Exception as err:  # a pool not started yet, Temporal away: next time
                log.debug("pool %s: no gauges this time: %s", name, err)
                continue
            key = (("pool", name),)
            queued[key] = float(len(state["queue"]))
            used[key] = float(sum(len(a["slotIds"]) for agent in state["agents"]
                                  for a in agent["allocations"]))
            offered[key] = float(sum(len(agent["slotIds"]) for agent in state["agents"]
                                     if agent["alive"] and agent["enabled"]))
        tracing.gauge("epochal.pool.queue_length", queued)
        tracing.gauge("epochal.pool.slots_used", used)
        tracing.gauge("epochal.pool.slots", offered)
        await asyncio.sleep(POOL_GAUGE_INTERVAL)


async def serve(settings: Settings) -> None:
    pool = await _retry("PostgreSQL", lambda: create_pool(settings.db_url))
    try:
        applied = await apply_migrations(pool)
        if applied:
            log.info("applied migrations: %s", ", ".join(applied))
        await ensure_admin_password(pool, settings.admin_password)
        if not os.environ.get("EPOCHAL_CLUSTER_TOKEN"):
            log.warning(
                "EPOCHAL_CLUSTER_TOKEN is not set: agents cannot authenticate to this master"
            )
        client = await _retry(
            "Temporal",
            lambda: Client.connect(
                settings.temporal_address, namespace=settings.temporal_namespace,
                interceptors=tracing.temporal_interceptors(),
            ),
        )
        await _retry("Temporal", lambda: start_resource_pools(client, settings.resource_pools))
        app = create_app(settings, pool, client)
        tracing.instrument_api(app)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=settings.api_host,
                port=settings.api_port,
                log_level="warning",
                timeout_graceful_shutdown=2,
            )
        )
        worker = build_worker(client, pool, cluster_storage=settings.checkpoint_storage)
        gauges = (asyncio.create_task(report_pool_gauges(client, settings.resource_pools))
                  if tracing.enabled() else None)
        try:
            async with worker:
                log.info("master serving on %s", settings.master_url)
                await server.serve()
        finally:
            if gauges is not None:
                gauges.cancel()
    finally:
        await pool.close()


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if tracing.setup("epochal-master"):
        log.info("tracing on (OpenTelemetry, configured by OTEL_* variables)")
    asyncio.run(serve(Settings.from_env()))


if __name__ == "__main__":
    main()
