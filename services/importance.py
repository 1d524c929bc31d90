"""Hyperparameter importance: which hyperparameters the searcher metric varies with.

Computed by Optuna's fANOVA (activities/model_sampling.py `rank_hyperparameters`), with each
share's spread over bootstrap resamples, over the trials that have a searcher metric, in a
worker thread, one computation at a time, on at most MAX_TRIALS trials (the most recent), and
kept until a trial's metric changes, so a dashboard polling it costs the
master one small query.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

import asyncpg

from activities.model_sampling import rank_hyperparameters

MAX_TRIALS = 2000
_CACHED_EXPERIMENTS = 64
_computing = asyncio.Lock()
# experiment id -> (what the answer was computed from, the answer)
_answers: OrderedDict[int, tuple[tuple[Any, ...], dict[str, Any]]] = OrderedDict()


async def hyperparameter_importance(pool: asyncpg.Pool, experiment_id: int,
                                    config: dict[str, Any]) -> dict[str, Any]:
    """Each hyperparameter's share of the searcher metric's variance (largest first) and its
    spread, with the metric, the method and how many trials it was computed from."""
    # How many trials have a searcher metric, the newest one's id and the metrics' sum: any
    # new or changed metric changes it.
    stamp = tuple(await pool.fetchrow(
        "SELECT count(*), max(id), sum(searcher_metric_value) FROM trials"
        " WHERE experiment_id = $1 AND searcher_metric_value IS NOT NULL", experiment_id))
    async with _computing:
        # Inside the lock: a request that waited for the same computation takes its answer.
        cached = _answers.get(experiment_id)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        rows = await pool.fetch(
            "SELECT hparams, searcher_metric_value FROM trials WHERE experiment_id = $1"
            " AND searcher_metric_value IS NOT NULL ORDER BY id DESC LIMIT $2",
            experiment_id, MAX_TRIALS)
        scored = [(r["hparams"], r["searcher_metric_value"]) for r in rows]
        found = await asyncio.to_thread(rank_hyperparameters, config, scored)
    answer = {"metric": config["searcher"]["metric"], "trials": len(rows),
              "method": found.method, "resamples": found.resamples,
              "importance": found.shares, "spread": found.spread}
    _answers[experiment_id] = (stamp, answer)
    _answers.move_to_end(experiment_id)
    while len(_answers) > _CACHED_EXPERIMENTS:
        _answers.popitem(last=False)
    return answer
