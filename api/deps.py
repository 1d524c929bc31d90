"""What routes receive: the pool, the Temporal client and the settings the master made, and the
watch the preemption long-polls wait on.

The getters are `async` only so that FastAPI calls them in the event loop: it runs plain `def`
dependencies in a worker thread, a thread hop per dependency on every request.
"""

from __future__ import annotations

from typing import Annotated, cast

import asyncpg
from fastapi import Depends, Request
from temporalio.client import Client

from api.preemption import PreemptionWatch
from api.settings import Settings


async def _pool(request: Request) -> asyncpg.Pool:
    return request.app.state.pool


async def _temporal(request: Request) -> Client:
    return cast(Client, request.app.state.temporal)


async def _settings(request: Request) -> Settings:
    return cast(Settings, request.app.state.settings)


async def _preemption(request: Request) -> PreemptionWatch:
    return cast(PreemptionWatch, request.app.state.preemption)


Pool = Annotated[asyncpg.Pool, Depends(_pool)]
Temporal = Annotated[Client, Depends(_temporal)]
AppSettings = Annotated[Settings, Depends(_settings)]
Preemption = Annotated[PreemptionWatch, Depends(_preemption)]
