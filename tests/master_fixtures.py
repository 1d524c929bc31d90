"""Session fixtures for tests that need the master's parts: its pool, its worker, a live API.

`live_master` serves the real FastAPI app with uvicorn on a free port inside the test session's
event loop, backed by the session's PostgreSQL and Temporal dev server; code under test (the
harness, the CLI) talks to it over real HTTP. Its workflows run on `master_worker`, in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
import pytest_asyncio
import uvicorn
from fastapi import FastAPI
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.database import apply_migrations, create_pool
from api.app import create_app
from api.auth import ensure_admin_password
from api.settings import Settings
from common import search_attributes
from common.payload_codec import data_converter
from common.processes import free_port
from deploy.master import MASTER_KEEP_ALIVE_SECONDS, build_worker


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def pool(postgres_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(postgres_url)
    await apply_migrations(pool)
    yield pool
    await pool.close()


@asynccontextmanager
async def serving_master(client: Client, pool: asyncpg.Pool) -> AsyncIterator[Worker]:
    """A master worker on `client`'s namespace, with Epochal's search attributes registered
    there (as a master registers them at boot)."""
    assert await search_attributes.register(client)
    async with build_worker(client, pool, findable=True) as worker:
        yield worker


@pytest.fixture(scope="session")
def master_worker(temporal_address: str, postgres_url: str) -> Iterator[Worker]:
    """The session's master worker, on an event loop of its own in a thread (with its own
    Temporal client and database pool), as a real master's worker never stands still: the
    session's loop does not run during synchronous tests, and a worker on it let its workflow
    tasks time out meanwhile, then lagged behind for the tests after."""
    started: queue.SimpleQueue[Worker | BaseException] = queue.SimpleQueue()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def serve() -> None:
        try:
            client = await Client.connect(temporal_address, data_converter=data_converter(None))
            own_pool = await create_pool(postgres_url)
            try:
                async with serving_master(client, own_pool) as worker:
                    started.put(worker)
                    await stop.wait()
            finally:
                await own_pool.close()
        except BaseException as error:
            started.put(error)  # read only when it failed before the worker started
            raise

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),),
                              name="session-master-worker", daemon=True)
    thread.start()
    worker = started.get(timeout=120)
    if isinstance(worker, BaseException):
        raise worker
    yield worker
    loop.call_soon_threadsafe(stop.set)
    thread.join(timeout=60)
    loop.close()


async def fresh_namespace(temporal_address: str, prefix: str) -> Client:
    """A client of a new Temporal namespace `<prefix>-<hex>` on the session's dev server, so its
    workflows meet nobody else's (ids, task queues, a worker's backlog); with the converter of
    a master without a cluster token."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = await Client.connect(temporal_address)
    await admin.workflow_service.register_namespace(
        RegisterNamespaceRequest(namespace=name,
                                 workflow_execution_retention_period=timedelta(days=1))
    )
    for _ in range(100):  # the namespace cache takes a moment to see it
        try:
            client = await Client.connect(temporal_address, namespace=name,
                                          data_converter=data_converter(None))
            await client.count_workflows()
            return client
        except Exception:
            await asyncio.sleep(0.2)
    raise AssertionError(f"namespace {name} never became usable")


# The session master's secrets: agents started by tests present the cluster token.
CLUSTER_TOKEN = "test-cluster-token"
ADMIN_PASSWORD = "test-admin-password"


@dataclass(frozen=True)
class LiveMaster:
    url: str
    settings: Settings
    pool: asyncpg.Pool
    temporal: Client
    app: FastAPI
    admin_token: str

    @property
    def admin_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}

    @property
    def agent_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.settings.cluster_token}"}


@asynccontextmanager
async def serving_in_process(app: FastAPI, port: int, *, keep_alive: int = 5,
                             log_level: str = "warning") -> AsyncIterator[uvicorn.Server]:
    """`app` served by uvicorn on `port` inside the running event loop, until the block ends.

    The server takes no signals: uvicorn binds SIGTERM to the server that serves and, stopping,
    puts back the handler it found, so servers of one process stopped out of their starting
    order left SIGTERM bound to a stopped one; sse_starlette ends every stream of the process
    when the server SIGTERM names is exiting, and every later stream of the worker came back
    empty."""
    server = uvicorn.Server(uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level=log_level,
        lifespan="on",  # closes the app's LISTEN connection (api/preemption.py)
        timeout_graceful_shutdown=1, timeout_keep_alive=keep_alive))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "the API server did not start"
            await asyncio.sleep(0.02)
        yield server
    finally:
        server.should_exit = True
        await task


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def live_master(
    postgres_url: str,
    temporal_client: Client,
    pool: asyncpg.Pool,
    master_worker: Worker,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[LiveMaster]:
    port = free_port()
    checkpoints = Path(tmp_path_factory.mktemp("checkpoints"))
    settings = Settings(
        db_url=postgres_url,
        api_port=port,
        checkpoint_dir=str(checkpoints),
        cluster_token=CLUSTER_TOKEN,
        admin_password=ADMIN_PASSWORD,
    )
    await ensure_admin_password(pool, ADMIN_PASSWORD)
    app = create_app(settings, pool, temporal_client, findable=True)
    async with serving_in_process(app, port, keep_alive=MASTER_KEEP_ALIVE_SECONDS):
        async with httpx.AsyncClient(base_url=settings.master_url) as client:
            answer = await client.post(
                "/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
            )
            answer.raise_for_status()
        yield LiveMaster(
            settings.master_url, settings, pool, temporal_client, app, answer.json()["token"]
        )


@pytest_asyncio.fixture(loop_scope="session")
async def api(live_master: LiveMaster) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the live master's API, logged in as admin."""
    async with httpx.AsyncClient(
        base_url=live_master.url, timeout=30, headers=live_master.admin_headers
    ) as client:
        yield client
