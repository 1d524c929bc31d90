"""Hyperparameter importance: which hyperparameters set an experiment's best trials apart.

Computed by Optuna (activities/model_sampling.py `importance`) over the trials that have a
searcher metric, in a worker thread, one computation at a time, on at most MAX_TRIALS trials
(the most recent), and kept until a trial's metric changes, so a dashboard polling it costs the
master one small query.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

from fastapi import APIRouter

from activities.model_sampling import importance
from api.deps import Pool
from api.errors import not_found
from api.queries import experiments as experiment_queries
from api.schemas import answers
from api.schemas.experiments import HyperparameterImportance

router = APIRouter(prefix="/api/v1", tags=["experiments"])

MAX_TRIALS = 2000
_CACHED_EXPERIMENTS = 64
_computing = asyncio.Lock()
# experiment id -> (what the answer was computed from, the answer)
_answers: OrderedDict[int, tuple[tuple[Any, ...], dict[str, Any]]] = OrderedDict()


@router.get("/experiments/{experiment_id}/hyperparameter-importance",
            **answers(HyperparameterImportance))
async def hyperparameter_importance(experiment_id: int, pool: Pool) -> dict[str, Any]:
    """Each hyperparameter's share of what sets the best trials apart on the searcher metric
    (largest first), with the metric and how many trials it was computed from."""
    config = await experiment_queries.fetch_experiment_config(pool, experiment_id)
    if config is None:
        raise not_found("experiment", experiment_id)
    stamp = await experiment_queries.fetch_scored_trials_stamp(pool, experiment_id)
    async with _computing:
        # Inside the lock: a request that waited for the same computation takes its answer.
        cached = _answers.get(experiment_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        rows = await experiment_queries.fetch_scored_trials(pool, experiment_id, MAX_TRIALS)
        shares = await asyncio.to_thread(
            importance, config, [(r["hparams"], r["searcher_metric_value"]) for r in rows])
    answer = {"metric": config["searcher"]["metric"], "trials": len(rows),
              "method": "ped-anova", "importance": shares}
    _answers[experiment_id] = (stamp, answer)
    _answers.move_to_end(experiment_id)
    while len(_answers) > _CACHED_EXPERIMENTS:
        _answers.popitem(last=False)
    return answer
