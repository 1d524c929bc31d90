"""Routes only Determined's Core API calls (`determined.core`, 0.38); Epochal's harness does not.

Everything both clients call lives with its resource (trials.py, tasks.py, checkpoints.py) and
accepts both spellings; these are the calls Epochal's own harness has no use for.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from api import auth, views
from api.deps import Pool
from api.errors import ApiError, not_found
from api.queries import experiments as experiment_queries
from api.queries import logs as log_queries
from api.queries import trials as trial_queries
from api.schemas import Empty, answers
from api.schemas.experiments import BestSearcherValidation
from common.temporal_names import task_id

router = APIRouter(prefix="/api/v1", tags=["determined"])

MAX_RUNNER_STATE_LENGTH = 1_000


class RunPrepareForReportingRequest(BaseModel):
    runId: int
    checkpointStorage: dict[str, Any] | None = None


class RunnerMetadata(BaseModel):
    state: str = Field(max_length=MAX_RUNNER_STATE_LENGTH)


@router.post("/runs/start", **answers(Empty))
async def prepare_run_for_reporting(
    body: RunPrepareForReportingRequest, request: Request, pool: Pool
) -> dict[str, Any]:
    """`core.init()` announces the run (a trial) before reporting. Epochal keeps checkpoints
    where the experiment's storage says, so there is no separate storage id to hand back."""
    await auth.require_trial_write(request, body.runId)
    await views.require_trial(pool, body.runId)
    return {}


@router.post("/trials/{trial_id}/runner/metadata", **answers(Empty))
async def post_runner_metadata(trial_id: int, body: RunnerMetadata, pool: Pool) -> dict[str, Any]:
    """`core.train.set_status(text)`: a short status line, kept in the trial's logs."""
    row = await trial_queries.fetch_trial_run(pool, trial_id)
    if row is None:
        raise not_found("trial", trial_id)
    task = task_id(row["experiment_id"], trial_id)
    await log_queries.insert_master_line(pool, trial_id, task, f"{task}.{row['run_id']}",
                                         row["agent_id"],
                                         f"status: {body.state.replace(chr(0), '')}\n")
    return {}


@router.get("/experiments/{experiment_id}/searcher/best_searcher_validation_metric",
            **answers(BestSearcherValidation))
async def best_searcher_validation_metric(experiment_id: int, pool: Pool) -> dict[str, Any]:
    """The best validation value of the searcher's metric over the experiment's trials
    (`core.train.get_experiment_best_validation()`); 404 while there is none, as Determined."""
    config = await experiment_queries.fetch_experiment_config(pool, experiment_id)
    if config is None:
        raise not_found("experiment", experiment_id)
    metric = str(config["searcher"].get("metric") or "")
    value = await experiment_queries.fetch_best_searcher_metric(pool, experiment_id)
    if value is None or not math.isfinite(value):
        raise ApiError(404, f"experiment {experiment_id} has no validation of {metric!r} yet")
    return {"metric": value}
