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
from activities.log_retention import delete_expired_trial_logs, run_log_retention
from activities.model_sampling import SamplingActivities
from activities.pool_start import start_pool
from activities.provisioning import ProvisioningActivities
from activities.scheduler import SchedulerActivities
from activities.task_store import TaskStore
from activities.workflow_messages import MessageActivities
from api import master_logs
from api.app import create_app
from api.auth import ensure_admin_password
from api.settings import Settings
from common import payload_codec, search_attributes, tracing
from common.agent_timeout import agent_timeout_seconds
from common.checkpoint_storage import S3Location, S3Store, StorageError, s3_credentials
from common.temporal_connection import connect
from common.temporal_names import (
    MASTER_TASK_QUEUE,
    PoolMessages,
    provisioner_workflow_id,
    resource_pool_workflow_id,
)
from deploy.local_cluster import default_state_dir
from providers import AgentSetup, Provider, make_provider
from providers.config import (
    MASTER_CONFIG_ENV,
    MasterConfigError,
    ProviderBase,
    load_master_config,
)
from wire.provisioning import ProvisionerInput
from workflows.experiment import ExperimentWorkflow
from workflows.provisioner import ProvisionerWorkflow
from workflows.resource_pool import ResourcePoolWorkflow
from workflows.task import TaskWorkflow
from workflows.trial import TrialWorkflow

log = logging.getLogger("epochal.master")
T = TypeVar("T")
CONNECT_ATTEMPTS = 60
MASTER_KEEP_ALIVE_SECONDS = 65


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
                 cluster_storage: dict[str, Any] | None = None,
                 providers: dict[str, tuple[ProviderBase, Provider]] | None = None,
                 findable: bool = False, **options: Any) -> Worker:
    """The master's worker; tests pass Worker options (e.g. `max_cached_workflows=0`, which
    replays every workflow task from history, as a restarted worker does). `findable`: the
    search attributes are registered (common/search_attributes.py)."""
    return Worker(
        client,
        task_queue=MASTER_TASK_QUEUE,
        workflows=[ExperimentWorkflow, TrialWorkflow, ResourcePoolWorkflow, ProvisionerWorkflow,
                   TaskWorkflow],
        activities=[*ExperimentStore(pool, cluster_storage).all(),
                    *TaskStore(pool).all(),
                    *SchedulerActivities(client, pool).all(),
                    *MessageActivities(client, findable=findable).all(),
                    SamplingActivities(pool).sample_trial_hparams,
                    *ProvisioningActivities(client, providers or {}).all()],
        **options,
    )


async def start_resource_pools(client: Client, names: tuple[str, ...],
                               provisioned: tuple[str, ...] = ()) -> None:
    """Start each pool's scheduler, and the provisioner of each pool with a provider, unless
    they run already (a restart finds them running)."""
    for name in dict.fromkeys((*names, *provisioned)):
        await start_pool(client, name)
    for name in provisioned:
        await client.start_workflow(
            ProvisionerWorkflow.run, ProvisionerInput(pool=name), id=provisioner_workflow_id(name),
            task_queue=MASTER_TASK_QUEUE, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)


def load_providers(settings: Settings) -> dict[str, tuple[ProviderBase, Provider]]:
    """The providers of EPOCHAL_MASTER_CONFIG's pools, ready to start their agents."""
    configs = load_master_config(os.environ.get(MASTER_CONFIG_ENV))
    providers: dict[str, tuple[ProviderBase, Provider]] = {}
    state_dir = str(default_state_dir())
    for pool, config in configs.items():
        master_url = config.master_url or settings.master_url
        if "://0.0.0.0" in master_url:
            raise MasterConfigError(
                f"resource_pools.{pool}.provider.master_url: the master listens on every "
                "address (EPOCHAL_API_HOST=0.0.0.0): say which one its agents reach it at")
        setup = AgentSetup(pool=pool, master_url=master_url,
                           temporal_address=config.temporal_address or settings.temporal_address,
                           namespace=settings.temporal_namespace,
                           cluster_token=settings.cluster_token,
                           slots=config.slots_per_instance)
        providers[pool] = (config, make_provider(config, setup, state_dir=state_dir))
    return providers


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
                    PoolMessages.DESCRIBE)
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


async def check_default_storage(settings: Settings) -> None:
    """Say at boot, not at the first checkpoint, when the cluster's default S3 storage cannot
    be used; make its bucket if EPOCHAL_CREATE_BUCKET asks (a fresh docker-compose site)."""
    storage = settings.checkpoint_storage
    if not storage:
        return
    location = S3Location.of(storage)
    credentials = s3_credentials(storage, {}, None)  # its own keys
    if credentials is None:
        log.error("checkpoint storage %s: EPOCHAL_CHECKPOINT_STORAGE has no access_key and "
                  "secret_key", location.describe())
        return
    try:
        made = await asyncio.to_thread(S3Store(location, credentials).check_bucket,
                                       create=settings.create_bucket)
    except StorageError as err:
        log.error("checkpoint storage: %s; checkpoints cannot be stored until it is fixed", err)
        return
    log.info("checkpoint storage: %s%s", location.describe(), " (made)" if made else "")


async def serve(settings: Settings,
                providers: dict[str, tuple[ProviderBase, Provider]] | None = None) -> None:
    providers = providers or {}
    pool = await _retry("PostgreSQL", lambda: create_pool(settings.db_url))
    try:
        applied = await apply_migrations(pool)
        if applied:
            log.info("applied migrations: %s", ", ".join(applied))
        await ensure_admin_password(pool, settings.admin_password)
        await check_default_storage(settings)
        if not os.environ.get("EPOCHAL_CLUSTER_TOKEN"):
            log.warning(
                "EPOCHAL_CLUSTER_TOKEN is not set: agents cannot authenticate to this master"
            )
        client = await _retry(
            "Temporal",
            lambda: connect(
                settings.temporal_address, settings.temporal_namespace,
                settings.temporal_security, interceptors=tracing.temporal_interceptors(),
                data_converter=payload_codec.data_converter(settings.cluster_token),
            ),
        )
        await _retry("Temporal", lambda: start_resource_pools(
            client, settings.resource_pools, tuple(providers)))
        findable = await search_attributes.register(client)
        app = create_app(settings, pool, client, findable=findable)
        tracing.instrument_api(app)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host=settings.api_host,
                port=settings.api_port,
                log_level="warning",
                timeout_graceful_shutdown=2,
                # Longer than any client keeps an idle connection (httpx: 5 s, as long as the
                # agent's heartbeat): at equal times a request sent as the server closes the
                # connection is lost ("Server disconnected without sending a response").
                timeout_keep_alive=MASTER_KEEP_ALIVE_SECONDS,
            )
        )
        worker = build_worker(client, pool, cluster_storage=settings.checkpoint_storage,
                              providers=providers, findable=findable)
        gauges = (asyncio.create_task(report_pool_gauges(client, settings.resource_pools))
                  if tracing.enabled() else None)
        # Trial logs whose retention has passed go at start and then every interval.
        retention = asyncio.create_task(run_log_retention(
            lambda: delete_expired_trial_logs(pool, settings.log_retention_days),
            settings.log_retention_interval))
        try:
            async with worker:
                log.info("master serving on %s", settings.master_url)
                await server.serve()
        finally:
            retention.cancel()
            if gauges is not None:
                gauges.cancel()
    finally:
        await pool.close()


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    master_logs.attach()  # `det master logs` (api/master_logs.py), from the first record on
    if tracing.setup("epochal-master"):
        log.info("tracing on (OpenTelemetry, configured by OTEL_* variables)")
    try:
        settings = Settings.from_env()
        agent_timeout_seconds()  # read where runs and pools start; checked once here
        providers = load_providers(settings)
    except ValueError as err:  # a setting that cannot work, named in the message
        log.error("%s", err)
        raise SystemExit(2) from None
    asyncio.run(serve(settings, providers))


if __name__ == "__main__":
    main()
