"""End-to-end clusters share one Temporal namespace, one after another: each starts clean.

A cluster's database is fresh, so its experiment ids start at 1 again and its workflow ids
(`experiment-1`, ...) would collide with workflows a previous module's cluster left running.
"""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client

from tests.conftest import E2E_NAMESPACE


async def _terminate_running(address: str) -> int:
    client = await Client.connect(address, namespace=E2E_NAMESPACE)
    handles = [
        client.get_workflow_handle(w.id, run_id=w.run_id)
        async for w in client.list_workflows("ExecutionStatus = 'Running'")
    ]
    await asyncio.gather(*(h.terminate("a new end-to-end cluster starts") for h in handles),
                         return_exceptions=True)
    return len(handles)


def start_clean(temporal_address: str) -> int:
    """Terminate every workflow still running in the end-to-end namespace; how many there were."""
    return asyncio.run(_terminate_running(temporal_address))


async def _fresh_ids(db_url: str) -> int:
    import asyncpg

    base = int(time.time()) % 1_000_000 * 1000
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute("SELECT setval('experiments_id_seq', $1)", base)
    finally:
        await conn.close()
    return base


def fresh_ids(db_url: str) -> int:
    """Start this cluster's experiment ids where no earlier cluster's were.

    The API starts `experiment-<id>` with REJECT_DUPLICATE, so an id a previous cluster used in
    the shared namespace (even for a closed workflow) would be refused. Call after `cluster up`
    (the master has created the tables).
    """
    return asyncio.run(_fresh_ids(db_url))
