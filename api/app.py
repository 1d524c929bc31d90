"""The master's FastAPI application: REST API under /api/v1 and the dashboard.

The pool, the Temporal client and the settings are made by whoever runs the app (the master
process, or a test) and reach routes as dependencies (api/deps.py); whoever made them closes them.
The app's own LISTEN connection (api/preemption.py) closes when the app shuts down.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg
from fastapi import Depends, FastAPI
from temporalio.client import Client

from api.auth import LoginThrottle, authorize
from api.body_limit import BodySizeLimit
from api.errors import install_error_handlers
from api.json_default import DefaultJsonContentType
from api.preemption import PreemptionWatch
from api.routes import (
    agents,
    checkpoints,
    cluster,
    dashboard,
    determined,
    experiments,
    importance,
    jobs,
    metrics,
    models,
    ntsc,
    proxy,
    streams,
    tasks,
    templates,
    trials,
    users,
    workspaces,
)
from api.settings import Settings


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await app.state.preemption.close()


def create_app(settings: Settings, pool: asyncpg.Pool, temporal: Client, *,
               findable: bool = False) -> FastAPI:
    """`findable`: Epochal's search attributes are registered in Temporal, so experiments are
    started with them (common/search_attributes.py)."""
    app = FastAPI(title="Epochal", version=cluster.VERSION, lifespan=_lifespan)
    app.state.settings = settings
    app.state.findable = findable
    app.state.pool = pool
    app.state.temporal = temporal
    app.state.login_throttle = LoginThrottle()
    app.state.preemption = PreemptionWatch(settings.db_url)
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit)
    app.add_middleware(DefaultJsonContentType)
    # Every API route resolves the caller's token first (api/auth.py; a few routes are public).
    for module in (users, agents, experiments, metrics, trials, checkpoints, tasks, cluster,
                   determined, streams, workspaces, templates, jobs, models, importance, ntsc):
        app.include_router(module.router, dependencies=[Depends(authorize)])
    # /proxy/<taskId>/: resolves the caller itself (the cookie for every method, Jupyter POSTs).
    app.include_router(proxy.router)
    app.include_router(dashboard.router)
    return app
