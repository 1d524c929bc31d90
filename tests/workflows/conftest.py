"""The workflow tests' own Temporal namespace and master worker.

The session's master worker serves namespace `default` for every module: its backlog, and what
other modules left running there, must not decide whether these tests, which time trials against
their timeouts, pass. A test's workflows are terminated when it ends, so one that fails leaves no
search running into the next.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest_asyncio
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.master_fixtures import fresh_namespace, serving_master
from tests.workflows.pool_helpers import GrantSink, Pool


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


@pytest_asyncio.fixture(loop_scope="session")
async def sinks(temporal_client: Client) -> AsyncIterator[str]:
    queue = f"sinks-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=queue, workflows=[GrantSink],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        yield queue


@pytest_asyncio.fixture(loop_scope="session")
async def rp(temporal_client: Client, master_worker: Worker, sinks: str) -> AsyncIterator[Pool]:
    """A fresh pool (terminated after the test with its other workflows: conftest.py)."""
    yield Pool(temporal_client, sinks)
