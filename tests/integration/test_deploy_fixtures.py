"""The shared session fixtures answer, and `fresh_db_url` gives an empty database per test."""

from __future__ import annotations

import asyncpg
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client


async def test_postgres_url_answers(postgres_url: str) -> None:
    conn = await asyncpg.connect(postgres_url)
    try:
        assert await conn.fetchval("SELECT current_database()") == postgres_url.rsplit("/", 1)[1]
    finally:
        await conn.close()


async def test_fresh_db_url_is_empty_and_separate(fresh_db_url: str, postgres_url: str) -> None:
    assert fresh_db_url != postgres_url
    conn = await asyncpg.connect(fresh_db_url)
    try:
        tables = await conn.fetchval(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'")
        assert tables == 0
        await conn.execute("CREATE TABLE mine (x int)")
    finally:
        await conn.close()


async def test_temporal_client_serves_default_namespace(temporal_client: Client,
                                                        temporal_address: str) -> None:
    assert temporal_client.namespace == "default"
    response = await temporal_client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace="default"))
    assert response.namespace_info.name == "default"
