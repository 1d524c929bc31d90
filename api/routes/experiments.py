"""Experiments: create, list, describe, control, and what belongs to them."""

from __future__ import annotations

import base64
import secrets
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from temporalio.client import WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.service import RPCError, RPCStatusCode

from api import auth, views
from api.deps import AppSettings, Pool, Temporal
from api.errors import ApiError, not_found
from api.log_stream import stream_logs
from api.model_definition import build_tarball
from workflows.constants import MASTER_TASK_QUEUE, experiment_workflow_id
from workflows.expconf import ConfigError, parse_experiment_config, validate_experiment_config
from workflows.types import ExperimentInput

router = APIRouter(prefix="/api/v1", tags=["experiments"])


class ModelFile(BaseModel):
    path: str
    type: int = 48
    content: str = ""
    mode: int = 0o644
    mtime: int = 0
    uid: int = 0
    gid: int = 0


class CreateExperimentRequest(BaseModel):
    config: str = Field(description="The experiment config as YAML text")
    modelDefinition: list[ModelFile] = Field(default_factory=list)
    activate: bool = True
    parentId: int | None = None
    projectId: int | None = None


def normalized_config(text: str, checkpoint_dir: str) -> dict[str, Any]:
    """Validate the YAML and fill in the master's defaults (checkpoint storage)."""
    try:
        config = parse_experiment_config(text, source="config")
        data = config.model_dump(mode="json")
        if data.get("checkpoint_storage") is None:
            data["checkpoint_storage"] = {"type": "shared_fs", "host_path": checkpoint_dir}
            data = validate_experiment_config(data, source="config").model_dump(mode="json")
    except ConfigError as err:
        raise ApiError(400, "invalid experiment config", list(err.errors)) from err
    return data


@router.post("/experiments")
async def create_experiment(
    body: CreateExperimentRequest,
    request: Request,
    pool: Pool,
    temporal: Temporal,
    settings: AppSettings,
) -> dict[str, Any]:
    owner = auth.require_user(auth.current(request), "create experiments").username
    config = normalized_config(body.config, settings.checkpoint_dir)
    tgz, size = build_tarball(
        [f.model_dump() for f in body.modelDefinition], settings.max_model_definition_bytes
    )
    seed = (config.get("reproducibility") or {}).get("experiment_seed")
    if seed is None:
        seed = secrets.randbelow(2**31)
    async with pool.acquire() as conn, conn.transaction():
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments"
            " (name, description, labels, config, original_config, seed, owner)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            config["name"],
            config.get("description"),
            config.get("labels") or [],
            config,
            body.config,
            seed,
            owner,
        )
        await conn.execute(
            "INSERT INTO model_definitions (experiment_id, tgz, size_bytes) VALUES ($1, $2, $3)",
            experiment_id,
            tgz,
            size,
        )
        # Started inside the transaction: if Temporal refuses, no experiment row is left behind.
        await temporal.start_workflow(
            "ExperimentWorkflow",
            ExperimentInput(experiment_id=experiment_id, config=config, seed=seed),
            id=experiment_workflow_id(experiment_id),
            task_queue=MASTER_TASK_QUEUE,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    row = await views.fetch_experiment_row(pool, experiment_id)
    assert row is not None
    if not body.activate:
        await _signal(temporal, pool, experiment_id, "pause")
    return {"experiment": views.experiment_json(row, []), "config": config, "warnings": []}


@router.get("/experiments")
async def list_experiments(
    pool: Pool,
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0),
    states: Annotated[list[str] | None, Query()] = None,
    orderBy: Literal["ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"] = "ORDER_BY_DESC",
    archived: bool | None = None,
) -> dict[str, Any]:
    wanted = [s.removeprefix("STATE_") for s in states] if states else None
    rows, total = await views.fetch_experiment_rows(
        pool,
        states=wanted,
        include_archived=bool(archived),
        order_desc=orderBy != "ORDER_BY_ASC",
        limit=limit,
        offset=offset,
    )
    return {
        "experiments": [views.experiment_json(r) for r in rows],
        "pagination": {"offset": offset, "limit": limit, "total": total},
    }


async def _experiment_row(pool: Pool, experiment_id: int) -> Any:
    row = await views.fetch_experiment_row(pool, experiment_id)
    if row is None:
        raise not_found("experiment", experiment_id)
    return row


@router.get("/experiments/{experiment_id}")
async def get_experiment(experiment_id: int, pool: Pool) -> dict[str, Any]:
    row = await _experiment_row(pool, experiment_id)
    trials = await views.fetch_trials(pool, experiment_id)
    return {"experiment": views.experiment_json(row, trials), "config": row["config"]}


async def _signal(temporal: Temporal, pool: Pool, experiment_id: int, signal: str) -> None:
    row = await _experiment_row(pool, experiment_id)
    if row["state"] in views.TERMINAL_STATES:
        raise ApiError(
            409, f"experiment {experiment_id} is {row['state']}: it can no longer {signal}"
        )
    handle: WorkflowHandle[Any, Any] = temporal.get_workflow_handle(
        experiment_workflow_id(experiment_id)
    )
    try:
        await handle.signal(signal)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ApiError(409, f"experiment {experiment_id} is no longer running") from err
        raise


def _control_route(signal: str) -> None:
    async def control(
        experiment_id: int, request: Request, pool: Pool, temporal: Temporal
    ) -> dict[str, Any]:
        await auth.require_owner(request, experiment_id, signal)
        await _signal(temporal, pool, experiment_id, signal)
        return {}

    control.__name__ = f"{signal}_experiment"
    router.post(
        f"/experiments/{{experiment_id}}/{signal}",
        summary=f"{signal.capitalize()} an experiment",
    )(control)


for _signal_name in ("pause", "activate", "cancel", "kill"):
    _control_route(_signal_name)


@router.get("/experiments/{experiment_id}/trials")
async def list_experiment_trials(experiment_id: int, pool: Pool) -> dict[str, Any]:
    await _experiment_row(pool, experiment_id)
    trials = await views.fetch_trials(pool, experiment_id)
    return {
        "trials": trials,
        "pagination": {"offset": 0, "limit": len(trials), "total": len(trials)},
    }


@router.get("/experiments/{experiment_id}/checkpoints")
async def list_experiment_checkpoints(experiment_id: int, pool: Pool) -> dict[str, Any]:
    await _experiment_row(pool, experiment_id)
    rows = await pool.fetch(
        views.CHECKPOINT_SELECT + " WHERE t.experiment_id = $1 ORDER BY c.report_time",
        experiment_id,
    )
    checkpoints = [views.checkpoint_json(r, r["searcher_metric"]) for r in rows]
    return {
        "checkpoints": checkpoints,
        "pagination": {"offset": 0, "limit": len(checkpoints), "total": len(checkpoints)},
    }


@router.get("/experiments/{experiment_id}/model_def")
async def get_model_definition(experiment_id: int, pool: Pool) -> dict[str, str]:
    tgz = await pool.fetchval(
        "SELECT tgz FROM model_definitions WHERE experiment_id = $1", experiment_id
    )
    if tgz is None:
        raise not_found("model definition of experiment", experiment_id)
    return {"b64Tgz": base64.b64encode(tgz).decode()}


@router.get("/experiments/{experiment_id}/logs")
async def experiment_logs(
    experiment_id: int, pool: Pool, follow: bool = False
) -> StreamingResponse:
    await _experiment_row(pool, experiment_id)

    async def is_done() -> bool:
        state = await pool.fetchval("SELECT state FROM experiments WHERE id = $1", experiment_id)
        return state in views.TERMINAL_STATES

    lines = stream_logs(
        pool,
        "l.trial_id IN (SELECT id FROM trials WHERE experiment_id = $1)",
        experiment_id,
        follow=follow,
        is_done=is_done,
    )
    return StreamingResponse(lines, media_type="application/x-ndjson")
