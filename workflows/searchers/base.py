"""The searcher interface the experiment workflow drives, and the operations searchers emit.

A search method is pure and event-driven: the workflow tells it what happened (a validation at
some length, a trial closing) and it answers with operations (create a trial, let one continue to
a new length, stop one). Its whole state is JSON (`snapshot`/`restore`), so an experiment that
continues-as-new carries its search forward, and every decision replays identically.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workflows.searchers.hparams import sample_hparams

JSON = dict[str, Any]

# Why a trial ended before the searcher closed it (Determined's exited reasons).
INVALID_HP = "EXITED_REASON_INVALID_HP"
ERRORED = "EXITED_REASON_ERRORED"
USER_STOPPED = "EXITED_REASON_USER_REQUESTED_STOP"


@dataclass(frozen=True)
class Create:
    """Start a trial with `hparams` that trains to `target` (None: as long as its training code
    decides), reporting at `decision` first. `hparams` None: the searcher's sampler draws them
    when the trial is created (activities/model_sampling.py)."""

    request_id: int
    hparams: JSON | None
    target: int | None
    decision: int | None  # the length of the first validation the searcher acts on; None: none


@dataclass(frozen=True)
class Continue:
    """The trial goes on: to a new `target` (a promotion) and/or to the next `decision`."""

    request_id: int
    target: int | None
    decision: int | None
    rung: int


@dataclass(frozen=True)
class Stop:
    """Close the trial: `early` when it has not reached its full length (it is stopped early)."""

    request_id: int
    early: bool
    rung: int


Op = Create | Continue | Stop


def trial_hparams(space: Mapping[str, Any], seed: int, request_id: int) -> JSON:
    """A random draw for one request, independent of the order requests are made in."""
    rng = random.Random(seed * 1_000_003 + request_id)
    return sample_hparams(space, rng)


class SearchMethod(ABC):
    """What the experiment workflow needs of a searcher."""

    @abstractmethod
    def initial(self) -> list[Op]:
        """The operations to start the search with."""

    @abstractmethod
    def on_validation(self, request_id: int, length: int, metric: float) -> list[Op]:
        """A validation of the searcher metric at `length` (only those at decision points)."""

    @abstractmethod
    def on_closed(self, request_id: int, exited_early: str | None) -> list[Op]:
        """The trial ended; `exited_early` says why when it was not the searcher's decision."""

    def waiting(self) -> set[int]:
        """Trials paused at a rung until a promotion (they hold no slot)."""
        return set()

    def finish_waiting(self) -> list[Op]:
        """Nothing runs any more: close every trial still waiting for a promotion."""
        return []

    def concurrency(self) -> int | None:
        """How many trials may run at once when the workflow paces creation; None: the
        searcher paces itself."""
        return None

    @abstractmethod
    def progress(self) -> float:
        """How far the search is, in [0, 1]."""

    @abstractmethod
    def snapshot(self) -> JSON:
        """Everything needed to continue the search in a new workflow run."""
