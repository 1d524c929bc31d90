"""Fixtures for tests of the agent: a stand-in master (the two routes an agent calls) and an
HTTP client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import pytest_asyncio

from tests.fakes.agent_master import FakeMaster


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    with FakeMaster() as m:
        yield m


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client
