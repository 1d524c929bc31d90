"""The workflow tests' own Temporal namespace and master worker.

The session's master worker serves namespace `default` for every module: its backlog, and what
other modules left running there, must not decide whether these tests, which time trials against
their timeouts, pass. A test's workflows are terminated when it ends, so one that fails leaves no
search running into the next.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import Worker

from tests.master_fixtures import fresh_namespace, serving_master


@pytest_asyncio.fixture(scope="package", loop_scope="session")
async def temporal_client(temporal_address: str) -> AsyncIterator[Client]:
    yield await fresh_namespace(temporal_address, "workflows")


@pytest_asyncio.fixture(scope="package", loop_scope="session")
async def master_worker(temporal_client: Client, pool: asyncpg.Pool) -> AsyncIterator[Worker]:
    async with serving_master(temporal_client, pool) as worker:
        yield worker


@pytest_asyncio.fixture(autouse=True, loop_scope="session")
async def _terminate_leftovers(temporal_client: Client) -> AsyncIterator[None]:
    yield
    async for execution in temporal_client.list_workflows("ExecutionStatus='Running'"):
        with contextlib.suppress(RPCError):  # it ended meanwhile
            await temporal_client.get_workflow_handle(
                execution.id, run_id=execution.run_id).terminate("the test ended")
