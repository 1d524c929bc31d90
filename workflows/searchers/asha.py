"""Asynchronous successive halving (ASHA; Li et al., MLSys 2020) and its adaptive variant.

A bracket has rungs at lengths `max / divisor^(rungs-1-i)`. Decisions are asynchronous: a trial
is judged against whatever its rung holds when its validation arrives, never waiting for the rung
to fill.

- Stopping (`stop_once: true`, Determined's default): trials train towards the full length; at
  each rung a trial continues while it is in the top 1/divisor of the rung so far (the first one
  always continues) and is stopped early otherwise. Each stop or finish starts the next trial.
- Promotion (`stop_once: false`, classic ASHA): trials train to their rung and wait there; when a
  rung holds k*divisor results, its best k are promoted and resume from their checkpoints. A
  result that promotes nobody starts a new trial instead.

A trial that exits early counts as the worst value in its rung; one that reports invalid
hyperparameters is forgotten and replaced. `adaptive_asha` runs several brackets (fewer rungs:
less early stopping) side by side and splits trials between them for roughly equal compute.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any

from common.expconf import AdaptiveAshaConfig, AsyncHalvingConfig
from workflows.searchers.base import (
    INVALID_HP,
    JSON,
    Continue,
    Create,
    Op,
    SearchMethod,
    Stop,
    trial_hparams,
)

WORST = math.inf  # a rung's value for a trial that exited early (values are "smaller is better")


def rung_lengths(num_rungs: int, divisor: float, max_length: int) -> list[int]:
    """The length each rung needs: rung i gets max_length / divisor^(num_rungs - i - 1)."""
    return [max(int(max_length / divisor ** (num_rungs - i - 1)), 1) for i in range(num_rungs)]


def capped_max_rungs(max_rungs: int, max_length: int, max_trials: int, divisor: float) -> int:
    """No more rungs than the length or the number of trials can support."""
    by_length = int(math.log(max_length) / math.log(divisor) + 1e-9) + 1
    by_trials = int(math.log(max_trials) / math.log(divisor) + 1e-9) + 1
    return max(1, min(max_rungs, by_length, by_trials))


def bracket_rungs_for(mode: str, max_rungs: int) -> list[int]:
    """How many rungs each bracket has, most early stopping first."""
    if mode == "aggressive":
        rungs = [max_rungs]
    elif mode == "standard":
        rungs = list(range((max_rungs - 1) // 2 + 1, max_rungs + 1))
    elif mode == "conservative":
        rungs = list(range(1, max_rungs + 1))
    else:
        raise ValueError(f"unknown adaptive mode {mode!r}")
    return sorted(rungs, reverse=True)


def bracket_max_trials(max_trials: int, divisor: float, brackets: list[int]) -> list[int]:
    """Trials per bracket so that each bracket gets roughly the same total compute.

    A bracket of r rungs spends about r units per divisor^(r-1) trials it evaluates.
    """
    weights = [divisor ** (r - 1) / r for r in brackets]
    total = sum(weights)
    trials = [max(int(w / total * max_trials), 1) for w in weights]
    trials[0] += max(max_trials - sum(trials), 0)
    return trials


def bracket_concurrency(max_concurrent: int, divisor: float, trials: list[int]) -> list[int]:
    """Concurrent trials per bracket: an even split (remainder to the most aggressive)."""
    n = len(trials)
    if max_concurrent == 0:
        return [max(trials[-1], int(divisor))] * n
    max_concurrent = max(max_concurrent, n)
    split = [max_concurrent // n] * n
    for i in range(max_concurrent % n):
        split[i] += 1
    return split


class Bracket:
    """One ASHA bracket. Request ids are the experiment's; the tournament hands them out."""

    def __init__(
        self,
        lengths: list[int],
        divisor: float,
        max_trials: int,
        max_concurrent: int,
        stop_once: bool,
        state: JSON | None = None,
    ) -> None:
        self.lengths = lengths
        self.divisor = divisor
        self.max_trials = max_trials
        self.max_concurrent = max_concurrent
        self.stop_once = stop_once
        s = state or {}
        # Per rung: sorted [value, request] pairs (value: smaller is better).
        self.rungs: list[list[list[float]]] = s.get("rungs") or [[] for _ in lengths]
        self.rung_of: dict[int, int] = {int(k): v for k, v in (s.get("rung_of") or {}).items()}
        self.promoted: list[list[int]] = s.get("promoted") or [[] for _ in lengths]
        self.waiting_ids: list[int] = s.get("waiting") or []
        self.closed: list[int] = s.get("closed") or []
        self.stopped: list[int] = s.get("stopped") or []
        self.invalid = int(s.get("invalid", 0))

    def snapshot(self) -> JSON:
        return {
            "rungs": self.rungs,
            "rung_of": {str(k): v for k, v in self.rung_of.items()},
            "promoted": self.promoted,
            "waiting": self.waiting_ids,
            "closed": self.closed,
            "stopped": self.stopped,
            "invalid": self.invalid,
        }

    @property
    def top(self) -> int:
        return len(self.lengths) - 1

    def counted(self) -> int:
        """Trials that count against max_trials (invalid ones were replaced)."""
        return len(self.rung_of) - self.invalid

    def initial_count(self) -> int:
        if self.max_concurrent > 0:
            return min(self.max_concurrent, self.max_trials)
        return max(1, min(int(self.divisor**self.top), self.max_trials))

    def first_target(self) -> int:
        return self.lengths[-1] if self.stop_once else self.lengths[0]

    def created(self, request_id: int) -> None:
        self.rung_of[request_id] = 0

    def _more(self) -> int:
        return 1 if self.counted() < self.max_trials else 0

    def _insert(self, rung: int, request_id: int, value: float) -> int:
        entries = self.rungs[rung]
        index = bisect.bisect_left([e[0] for e in entries], value)
        entries.insert(index, [value, request_id])
        return index

    def _remove(self, request_id: int) -> None:
        for entries in self.rungs:
            entries[:] = [e for e in entries if int(e[1]) != request_id]

    def on_validation(self, request_id: int, length: int, value: float) -> tuple[list[Op], int]:
        """(operations, how many new trials to create)."""
        if request_id not in self.rung_of or request_id in self.closed:
            return [], 0
        if self.stop_once:
            return self._stop_or_continue(request_id, length, value)
        return self._promote(request_id, length, value)

    def _stop_or_continue(self, rid: int, length: int, value: float) -> tuple[list[Op], int]:
        start = rung = self.rung_of[rid]
        while rung <= self.top and length >= self.lengths[rung]:
            self.rung_of[rid] = rung
            index = self._insert(rung, rid, value)
            if rung == self.top:
                self.stopped.append(rid)
                return [Stop(rid, early=False, rung=rung)], self._more()
            keep = max(int(len(self.rungs[rung]) / self.divisor), 1)
            if index >= keep:
                self.stopped.append(rid)
                return [Stop(rid, early=True, rung=rung)], self._more()
            rung += 1
        if rung > start:
            self.rung_of[rid] = rung
            return [Continue(rid, target=None, decision=self.lengths[rung], rung=rung)], 0
        return [], 0

    def _promote(self, rid: int, length: int, value: float) -> tuple[list[Op], int]:
        rung = self.rung_of[rid]
        if length < self.lengths[rung] or rid in self.waiting_ids:
            return [], 0
        self._insert(rung, rid, value)
        if rung == self.top:
            self.stopped.append(rid)
            return [Stop(rid, early=False, rung=rung)], self._more()
        self.waiting_ids.append(rid)
        ops = self._promotions(rung)
        return ops, (0 if ops else self._more())

    def _promotions(self, rung: int) -> list[Op]:
        """Promote the best k of a rung holding at least k*divisor results (not yet promoted)."""
        if rung >= self.top:
            return []
        entries = self.rungs[rung]
        k = int(len(entries) / self.divisor)
        ops: list[Op] = []
        # Sets for the membership tests: lists here would make each call O(k^2).
        promoted, waiting = set(self.promoted[rung]), set(self.waiting_ids)
        for value, raw_id in entries[:k]:
            candidate = int(raw_id)
            if value == WORST or candidate in promoted:
                continue
            if candidate not in waiting:
                continue  # it left the rung (exited) before it could be promoted
            self.promoted[rung].append(candidate)
            self.waiting_ids.remove(candidate)
            self.rung_of[candidate] = rung + 1
            nxt = self.lengths[rung + 1]
            ops.append(Continue(candidate, target=nxt, decision=nxt, rung=rung + 1))
        return ops

    def on_closed(self, rid: int, exited_early: str | None) -> tuple[list[Op], int]:
        if rid not in self.rung_of or rid in self.closed:
            return [], 0
        self.closed.append(rid)
        if rid in self.waiting_ids:
            self.waiting_ids.remove(rid)
        if exited_early == INVALID_HP:
            self.invalid += 1
            self._remove(rid)
            return [], 1  # replaced: it does not count against max_trials
        if exited_early is not None:
            if rid in self.stopped:
                return [], 0  # it failed after the searcher stopped it, which replaced it
            rung = self.rung_of[rid]
            if not any(int(e[1]) == rid for e in self.rungs[rung]):
                self._insert(rung, rid, WORST)
            ops = [] if self.stop_once else self._promotions(rung)
            return ops, (0 if ops else self._more())
        if rid not in self.stopped:
            # It ended on its own without a final validation the searcher saw.
            return [], self._more()
        return [], 0

    def finish_waiting(self) -> list[Op]:
        ops: list[Op] = [Stop(rid, early=True, rung=self.rung_of[rid]) for rid in self.waiting_ids]
        self.stopped.extend(self.waiting_ids)
        self.waiting_ids = []
        return ops

    def done(self) -> bool:
        return self.counted() >= self.max_trials and len(self.closed) == len(self.rung_of)

    def progress(self) -> float:
        valid_closed = len(self.closed) - self.invalid
        return min(1.0, max(valid_closed, 0) / self.max_trials)


class AshaSearch(SearchMethod):
    """A tournament of brackets (one for `async_halving`), handing out request ids and hparams."""

    def __init__(
        self,
        searcher: AsyncHalvingConfig | AdaptiveAshaConfig,
        hparams: Mapping[str, Any],
        seed: int,
        state: JSON | None = None,
    ) -> None:
        self.hparams = hparams
        self.seed = seed
        self.sampled = searcher.sampler is not None  # hparams drawn at creation
        self.sign = 1.0 if searcher.smaller_is_better else -1.0
        max_length = searcher.total_length
        divisor = float(searcher.divisor)
        max_trials = searcher.max_trials
        stop_once = searcher.stop_once
        if isinstance(searcher, AsyncHalvingConfig):
            shapes = [searcher.num_rungs]
            trials = [max_trials]
            concurrency = [searcher.max_concurrent_trials]
        else:
            shapes = searcher.bracket_rungs or bracket_rungs_for(
                searcher.mode,
                capped_max_rungs(searcher.max_rungs, max_length, max_trials, divisor),
            )
            shapes = sorted(shapes, reverse=True)
            trials = bracket_max_trials(max_trials, divisor, shapes)
            concurrency = bracket_concurrency(searcher.max_concurrent_trials, divisor, trials)
        s = state or {}
        saved = s.get("brackets") or [None] * len(shapes)
        self.brackets = [
            Bracket(rung_lengths(r, divisor, max_length), divisor, t, c, stop_once, saved[i])
            for i, (r, t, c) in enumerate(zip(shapes, trials, concurrency, strict=True))
        ]
        self.bracket_of: dict[int, int] = {
            int(k): v for k, v in (s.get("bracket_of") or {}).items()
        }
        self.next_request = int(s.get("next_request", 0))

    def snapshot(self) -> JSON:
        return {
            "brackets": [b.snapshot() for b in self.brackets],
            "bracket_of": {str(k): v for k, v in self.bracket_of.items()},
            "next_request": self.next_request,
        }

    def _create(self, bracket: int) -> Create:
        rid = self.next_request
        self.next_request += 1
        self.bracket_of[rid] = bracket
        b = self.brackets[bracket]
        b.created(rid)
        return Create(
            rid, None if self.sampled else trial_hparams(self.hparams, self.seed, rid),
            b.first_target(), b.lengths[0]
        )

    def _creates(self, bracket: int, n: int) -> list[Op]:
        return [self._create(bracket) for _ in range(n)]

    def initial(self) -> list[Op]:
        ops: list[Op] = []
        for i, bracket in enumerate(self.brackets):
            ops += self._creates(i, bracket.initial_count())
        return ops

    def on_validation(self, request_id: int, length: int, metric: float) -> list[Op]:
        i = self.bracket_of.get(request_id)
        if i is None:
            return []
        ops, n = self.brackets[i].on_validation(request_id, length, self.sign * metric)
        return ops + self._creates(i, n)

    def on_closed(self, request_id: int, exited_early: str | None) -> list[Op]:
        i = self.bracket_of.get(request_id)
        if i is None:
            return []
        ops, n = self.brackets[i].on_closed(request_id, exited_early)
        return ops + self._creates(i, n)

    def waiting(self) -> set[int]:
        return {rid for b in self.brackets for rid in b.waiting_ids}

    def finish_waiting(self) -> list[Op]:
        return [op for b in self.brackets for op in b.finish_waiting()]

    def rung_length(self, request_id: int) -> int:
        b = self.brackets[self.bracket_of[request_id]]
        return b.lengths[b.rung_of[request_id]]

    def progress(self) -> float:
        total = sum(b.max_trials for b in self.brackets)
        return sum(b.progress() * b.max_trials for b in self.brackets) / total
