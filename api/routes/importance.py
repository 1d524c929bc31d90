"""Hyperparameter importance: which hyperparameters the searcher metric varies with
(services/importance.py computes and keeps it)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from api.deps import Pool
from api.errors import not_found
from api.queries import experiments as experiment_queries
from api.schemas import answers
from api.schemas.experiments import HyperparameterImportance
from services.importance import hyperparameter_importance as importance_of

router = APIRouter(prefix="/api/v1", tags=["experiments"])


@router.get("/experiments/{experiment_id}/hyperparameter-importance",
            **answers(HyperparameterImportance))
async def hyperparameter_importance(experiment_id: int, pool: Pool) -> dict[str, Any]:
    """Each hyperparameter's share of the searcher metric's variance (largest first) and its
    spread, with the metric, the method and how many trials it was computed from."""
    config = await experiment_queries.fetch_experiment_config(pool, experiment_id)
    if config is None:
        raise not_found("experiment", experiment_id)
    return await importance_of(pool, experiment_id, config)
