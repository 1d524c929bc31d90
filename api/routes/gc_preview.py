"""`GET /experiments/{id}/preview_gc`: what checkpoint GC with other counts would delete.

Determined serves it outside /api/v1 (its echo routes), and `det experiment set gc-policy` asks
there before it changes the policy (PATCH /api/v1/experiments/{id},
services/experiment_settings.py).
"""

from __future__ import annotations

from typing import Any

import asyncpg
from fastapi import APIRouter, Query

from api import views
from api.deps import Pool
from api.errors import not_found
from api.queries import checkpoints as checkpoint_queries
from api.queries import experiments as experiment_queries
from api.schemas import answers
from api.schemas import checkpoints as checkpoint_schemas
from common.expconf import RetentionCounts
from services import checkpoint_files

router = APIRouter(tags=["experiments"])

MAX_COUNT = 2**31 - 1  # Determined's int32 fields


@router.get("/experiments/{experiment_id}/preview_gc", **answers(checkpoint_schemas.GcPreview))
async def preview_gc(
    experiment_id: int,
    pool: Pool,
    save_experiment_best: int = Query(0, ge=0, le=MAX_COUNT),
    save_trial_best: int = Query(0, ge=0, le=MAX_COUNT),
    save_trial_latest: int = Query(0, ge=0, le=MAX_COUNT),
) -> dict[str, Any]:
    """The checkpoints GC with these counts would delete now, as Determined's master sends its
    checkpoint rows (which `det experiment set gc-policy` counts), and the searcher's metric."""
    config = await experiment_queries.fetch_experiment_config(pool, experiment_id)
    if config is None:
        raise not_found("experiment", experiment_id)
    counts = RetentionCounts(save_experiment_best=save_experiment_best,
                             save_trial_best=save_trial_best,
                             save_trial_latest=save_trial_latest)
    uuids = await checkpoint_files.preview_gc(pool, experiment_id, config, counts)
    rows = await checkpoint_queries.fetch_checkpoints(pool, uuids)
    return {"checkpoints": [_checkpoint_json(r) for r in rows],
            "metric_name": config["searcher"]["metric"]}


def _checkpoint_json(row: asyncpg.Record) -> dict[str, Any]:
    """A checkpoint as Determined's `model.Checkpoint` marshals (Go field names)."""
    resources = row["resources"] or {}
    return {
        "UUID": row["uuid"], "TaskID": row["task_id"], "AllocationID": row["allocation_id"],
        "ReportTime": views.rfc3339(row["report_time"]), "State": row["state"],
        "Resources": resources, "Metadata": row["metadata"] or {},
        "Size": sum(v for v in resources.values() if isinstance(v, int)),
        "TrialID": row["trial_id"], "ExperimentID": row["experiment_id"],
        "HParams": row["hparams"], "ValidationMetrics": row["validation"] or {},
        "StepsCompleted": row["steps_completed"],
    }
