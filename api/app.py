"""The master's FastAPI application: REST API under /api/v1 and the dashboard.

The pool, the Temporal client and the settings are made by whoever runs the app (the master
process, or a test) and reach routes as dependencies (api/deps.py); whoever made them closes them.
The app's own LISTEN connection (api/preemption.py) closes when the app shuts down.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import asyncpg
from fastapi import APIRouter, Depends, FastAPI
from fastapi.routing import APIRoute
from temporalio.client import Client

from api import access
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
    gc_preview,
    importance,
    imports,
    jobs,
    metrics,
    models,
    ntsc,
    proxy,
    resource_pools,
    resources,
    streams,
    tasks,
    templates,
    temporal_codec,
    trials,
    unmanaged,
    users,
    workspaces,
)
from api.settings import Settings

# The routers behind `authorize`, each route with its rule in api/access.py.
API_MODULES = (users, agents, experiments, metrics, trials, checkpoints, tasks, cluster,
               determined, streams, workspaces, templates, jobs, models, importance, ntsc,
               temporal_codec, gc_preview, unmanaged, resource_pools, resources,
               imports)


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await app.state.preemption.close()


def _check_access_rules(router: APIRouter) -> None:
    """Every route has its rule in api/access.py: a route without one is a mistake to catch
    before serving, not a route open to whoever calls it."""
    missing = [f"{method} {route.path}" for route in router.routes
               if isinstance(route, APIRoute) for method in sorted(route.methods or ())
               if access.rule_of(method, route.path) is None]
    if missing:
        raise RuntimeError(f"routes without an access rule in api/access.py: {missing}")


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
    for module in API_MODULES:
        _check_access_rules(module.router)
        app.include_router(module.router, dependencies=[Depends(authorize)])
    # /proxy/<taskId>/: resolves the caller itself (the cookie for every method, Jupyter POSTs).
    app.include_router(proxy.router)
    app.include_router(dashboard.router)
    return app
