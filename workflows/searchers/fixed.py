"""Searchers that decide every trial up front (single, grid, random) as a SearchMethod.

They make no decisions while trials run: every trial trains to `max_length` (or, without one,
as long as its training code decides), and the workflow paces creation to `max_concurrent_trials`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workflows.searchers.base import JSON, Create, Op, SearchMethod


class FixedSearch(SearchMethod):
    def __init__(
        self,
        trials: Callable[[], Sequence[JSON | None]],
        max_length: int | None,
        max_concurrent: int,
        state: JSON | None = None,
    ) -> None:
        self._trials = trials  # regenerated (deterministically) rather than carried in state
        self.max_length = max_length
        self.max_concurrent = max_concurrent
        s = state or {}
        self.total = int(s.get("total", -1))
        self.closed = int(s.get("closed", 0))

    def initial(self) -> list[Op]:
        trials = self._trials()
        self.total = len(trials)
        return [Create(i, hparams, self.max_length, None) for i, hparams in enumerate(trials)]

    def on_validation(self, request_id: int, length: int, metric: float) -> list[Op]:
        return []

    def on_closed(self, request_id: int, exited_early: str | None) -> list[Op]:
        self.closed += 1
        return []

    def concurrency(self) -> int | None:
        return self.max_concurrent or None

    def progress(self) -> float:
        return self.closed / self.total if self.total > 0 else 0.0

    def snapshot(self) -> dict[str, Any]:
        return {"total": self.total, "closed": self.closed}
