"""The master's FastAPI application: REST API under /api/v1 and the dashboard.

The pool, the Temporal client and the settings are made by whoever runs the app (the master
process, or a test) and reach routes as dependencies (api/deps.py); whoever made them closes them.
"""

from __future__ import annotations

import asyncpg
from fastapi import FastAPI
from temporalio.client import Client

from api.errors import install_error_handlers
from api.routes import agents, checkpoints, cluster, dashboard, experiments, tasks, trials
from api.settings import Settings


def create_app(settings: Settings, pool: asyncpg.Pool, temporal: Client) -> FastAPI:
    app = FastAPI(title="Epochal", version=cluster.VERSION)
    app.state.settings = settings
    app.state.pool = pool
    app.state.temporal = temporal
    install_error_handlers(app)
    for module in (agents, experiments, trials, checkpoints, tasks, cluster, dashboard):
        app.include_router(module.router)
    return app
