"""What a searcher would do with a config, without starting anything (`det preview-search`).

Determined's summary: how many trials train how far. Searchers that decide their trials up front
(single, grid, random, optuna) train every trial to `max_length` ("train to completion"); ASHA's
brackets, as Epochal's own searcher builds them (workflows/searchers/asha.py), stop a share of
each rung's trials there: of n trials reaching a rung, max(int(n / divisor), 1) go on, the rest
train only that rung's length, and those reaching the top rung train the whole length.
Determined estimates it the same way (master/pkg/searcher/simulate.go).
"""

from __future__ import annotations

from typing import Any

from common.expconf import (
    AdaptiveAshaConfig,
    AsyncHalvingConfig,
    ExperimentConfig,
    hyperparameters_grid_size,
)
from workflows.searchers.asha import (
    bracket_max_trials,
    bracket_rungs_for,
    capped_max_rungs,
    rung_lengths,
)

JSON = dict[str, Any]


def _brackets(searcher: AsyncHalvingConfig | AdaptiveAshaConfig) -> list[tuple[int, int]]:
    """(rungs, trials) of each bracket, as AshaSearch makes them."""
    divisor = float(searcher.divisor)
    if isinstance(searcher, AsyncHalvingConfig):
        return [(searcher.num_rungs, searcher.max_trials)]
    shapes = searcher.bracket_rungs or bracket_rungs_for(
        searcher.mode,
        capped_max_rungs(searcher.max_rungs, searcher.total_length, searcher.max_trials,
                         divisor))
    shapes = sorted(shapes, reverse=True)
    trials = bracket_max_trials(searcher.max_trials, divisor, shapes)
    return list(zip(shapes, trials, strict=True))


def _asha_trials(searcher: AsyncHalvingConfig | AdaptiveAshaConfig) -> list[JSON]:
    divisor = float(searcher.divisor)
    per_length: dict[int, int] = {}
    for rungs, trials in _brackets(searcher):
        reaching = trials
        lengths = rung_lengths(rungs, divisor, searcher.total_length)
        for i, length in enumerate(lengths):
            going_on = max(int(reaching / divisor), 1)
            stopping = reaching if i == len(lengths) - 1 else reaching - going_on
            # A rung nobody stops at is listed with 0 trials, as Determined lists it.
            per_length[length] = per_length.get(length, 0) + stopping
            reaching = going_on
    return [{"count": count, "unit": {"name": searcher.length_unit, "value": length,
                                      "maxLength": False}}
            for length, count in sorted(per_length.items())]


def planned_count(config: ExperimentConfig) -> int:
    """How many trials a searcher that decides them up front creates."""
    searcher = config.searcher
    if searcher.name == "grid":
        return hyperparameters_grid_size(config.hyperparameters)
    return int(getattr(searcher, "max_trials", 1))


def search_summary(config: ExperimentConfig) -> JSON:
    """Determined's v1SearchSummary: the searcher's config (defaults filled in) and
    v1TrialSummary rows, shortest training first."""
    searcher = config.searcher
    if isinstance(searcher, AsyncHalvingConfig | AdaptiveAshaConfig):
        trials = _asha_trials(searcher)
    else:
        trials = [{"count": planned_count(config), "unit": {"maxLength": True}}]
    return {"config": searcher.model_dump(mode="json"), "trials": trials}
