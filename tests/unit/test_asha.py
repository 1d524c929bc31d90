"""ASHA (async_halving) and adaptive ASHA: rung arithmetic, and stopping and promotion decisions
against hand-computed operation sequences, then properties of whole simulated searches
(max_trials, determinism, snapshot/restore) and the config checks of the searcher fields."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from common.expconf import ConfigError, stored_config, validate_experiment_config
from workflows.searchers import make_search
from workflows.searchers.asha import (
    AshaSearch,
    bracket_concurrency,
    bracket_max_trials,
    bracket_rungs_for,
    capped_max_rungs,
    rung_lengths,
)
from workflows.searchers.base import (
    ERRORED,
    INVALID_HP,
    USER_STOPPED,
    Continue,
    Create,
    Op,
    SearchMethod,
    Stop,
)

SEED = 7
HPARAMS: dict[str, Any] = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "units": {"type": "int", "minval": 8, "maxval": 64},
    "act": {"type": "categorical", "vals": ["relu", "tanh"]},
}


def config(name: str = "async_halving", **fields: Any) -> dict[str, Any]:
    searcher: dict[str, Any] = {"name": name, "metric": "loss", **fields}
    return {"entrypoint": "python3 train.py", "hyperparameters": HPARAMS, "searcher": searcher}


def halving(**fields: Any) -> dict[str, Any]:
    """Divisor 2, 3 rungs of a length of 8: rungs at 2, 4 and 8."""
    defaults: dict[str, Any] = {
        "max_length": {"batches": 8},
        "num_rungs": 3,
        "divisor": 2,
        "max_trials": 4,
        "max_concurrent_trials": 2,
    }
    return config("async_halving", **{**defaults, **fields})


def new(cfg: dict[str, Any], seed: int = SEED) -> AshaSearch:
    search = make_search(stored_config(cfg), seed)
    assert isinstance(search, AshaSearch)
    return search


def short(ops: list[Op]) -> list[tuple[Any, ...]]:
    """Operations without hyperparameters, easy to write out by hand."""
    out: list[tuple[Any, ...]] = []
    for op in ops:
        if isinstance(op, Create):
            out.append(("create", op.request_id, op.target, op.decision))
        elif isinstance(op, Continue):
            out.append(("continue", op.request_id, op.target, op.decision, op.rung))
        else:
            out.append(("stop", op.request_id, op.early, op.rung))
    return out


# --- rung arithmetic ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_rungs", "divisor", "max_length", "lengths"),
    [
        (3, 2, 8, [2, 4, 8]),
        (4, 4, 256, [4, 16, 64, 256]),
        (2, 4, 256, [64, 256]),
        (1, 4, 10, [10]),
        (5, 4, 100, [1, 1, 6, 25, 100]),  # floors, and never below 1
        (3, 3.0, 100, [11, 33, 100]),
        (3, 2.5, 10, [1, 4, 10]),
    ],
)
def test_rung_lengths(num_rungs: int, divisor: float, max_length: int, lengths: list[int]) -> None:
    assert rung_lengths(num_rungs, divisor, max_length) == lengths


@pytest.mark.parametrize(
    ("max_rungs", "max_length", "max_trials", "divisor", "rungs"),
    [
        (5, 256, 10_000, 4, 5),  # log4(256) + 1 = 5: nothing caps it
        (5, 256, 100, 4, 4),  # log4(100) = 3.3 -> 4 rungs by trials
        (5, 10, 1000, 4, 2),  # log4(10) = 1.7 -> 2 rungs by length
        (3, 10**6, 10**6, 2, 3),  # max_rungs itself
        (5, 100, 3, 4, 1),
        (5, 1, 1, 4, 1),
        # log(1000)/log(10) is 2.9999999999999996 in floats; the epsilon makes it 3 (Go's
        # int() of the raw quotient would give one rung fewer).
        (5, 1000, 1000, 10, 4),
        (5, 64, 64, 2, 5),
    ],
)
def test_capped_max_rungs(
    max_rungs: int, max_length: int, max_trials: int, divisor: float, rungs: int
) -> None:
    assert capped_max_rungs(max_rungs, max_length, max_trials, divisor) == rungs


@pytest.mark.parametrize(
    ("mode", "max_rungs", "brackets"),
    [
        ("aggressive", 5, [5]),
        ("aggressive", 1, [1]),
        ("standard", 5, [5, 4, 3]),
        ("standard", 4, [4, 3, 2]),
        ("standard", 2, [2, 1]),
        ("standard", 1, [1]),
        ("conservative", 3, [3, 2, 1]),
        ("conservative", 1, [1]),
    ],
)
def test_bracket_rungs_for(mode: str, max_rungs: int, brackets: list[int]) -> None:
    assert bracket_rungs_for(mode, max_rungs) == brackets


def test_bracket_rungs_for_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown adaptive mode 'wild'"):
        bracket_rungs_for("wild", 3)


@pytest.mark.parametrize(
    ("max_trials", "divisor", "brackets", "trials"),
    [
        # weights 4^3/4 = 16, 4^2/3 = 5.33, 4/2 = 2 of 23.33: 68.6, 22.9, 8.6 -> 68, 22, 8;
        # the 2 left over go to the most aggressive bracket.
        (100, 4, [4, 3, 2], [70, 22, 8]),
        (10, 4, [1], [10]),
        # divisor 2: weights 2, 1.33, 1 of 4.33: 27.7, 18.5, 13.8 -> 27 + 2, 18, 13.
        (60, 2, [4, 3, 2], [29, 18, 13]),
        # Each bracket gets at least one trial, even beyond max_trials (as in Determined).
        (5, 4, [4, 3, 2, 1], [3, 1, 1, 1]),
    ],
)
def test_bracket_max_trials(
    max_trials: int, divisor: float, brackets: list[int], trials: list[int]
) -> None:
    assert bracket_max_trials(max_trials, divisor, brackets) == trials


@pytest.mark.parametrize(
    ("max_concurrent", "trials", "split"),
    [
        (16, [70, 22, 8], [6, 5, 5]),  # even split, the remainder to the most aggressive
        (7, [10, 5], [4, 3]),
        (2, [70, 22, 8], [1, 1, 1]),  # at least one per bracket
        (0, [70, 22, 8], [8, 8, 8]),  # unset: the last bracket's trials...
        (0, [70, 22, 2], [4, 4, 4]),  # ...but no fewer than the divisor
    ],
)
def test_bracket_concurrency(max_concurrent: int, trials: list[int], split: list[int]) -> None:
    assert bracket_concurrency(max_concurrent, 4, trials) == split


def test_adaptive_builds_brackets_from_the_config() -> None:
    cfg = config(
        "adaptive_asha", max_length={"batches": 256}, max_trials=100, max_concurrent_trials=16
    )
    search = new(cfg)
    # capped_max_rungs(5, 256, 100, 4) = 4; standard mode -> [4, 3, 2].
    assert [b.lengths for b in search.brackets] == [[4, 16, 64, 256], [16, 64, 256], [64, 256]]
    assert [b.max_trials for b in search.brackets] == [70, 22, 8]
    assert [b.max_concurrent for b in search.brackets] == [6, 5, 5]
    ops = search.initial()
    assert short(ops) == (
        [("create", i, 256, 4) for i in range(6)]
        + [("create", i, 256, 16) for i in range(6, 11)]
        + [("create", i, 256, 64) for i in range(11, 16)]
    )
    assert search.progress() == 0.0


def test_adaptive_bracket_rungs_given_outright_and_time_metric() -> None:
    cfg = config(
        "adaptive_asha",
        time_metric="samples",
        max_time=1000,
        divisor=10,
        bracket_rungs=[1, 3],
        max_trials=20,
        max_concurrent_trials=0,
    )
    search = new(cfg)
    assert [b.lengths for b in search.brackets] == [[10, 100, 1000], [1000]]
    # weights 10^2/3 = 33.3 and 1 of 34.3: 19.4 -> 19, 0.58 -> at least 1.
    assert [b.max_trials for b in search.brackets] == [19, 1]
    # Unset concurrency: the last bracket's max_trials (1), but no fewer than the divisor.
    assert [b.max_concurrent for b in search.brackets] == [10, 10]
    assert short(search.initial()) == [("create", i, 1000, 10) for i in range(10)] + [
        ("create", 10, 1000, 1000)
    ]


def test_async_halving_without_concurrency_starts_divisor_to_the_top_trials() -> None:
    search = new(halving(max_concurrent_trials=0, max_trials=10))
    assert short(search.initial()) == [("create", i, 8, 2) for i in range(4)]  # 2^(3-1)


# --- stopping (stop_once: true) -----------------------------------------------------------------


def test_stopping_hand_computed() -> None:
    """Divisor 2, rungs at 2/4/8, 4 trials, 2 at a time: a trial goes on while its insert index
    in the rung is below max(floor(n/2), 1); each stop starts the next trial."""
    s = new(halving())
    assert short(s.initial()) == [("create", 0, 8, 2), ("create", 1, 8, 2)]
    steps: list[tuple[int, int, float, list[tuple[Any, ...]]]] = [
        # rung 0 [0.5]: index 0 < 1
        (0, 2, 0.5, [("continue", 0, None, 4, 1)]),
        # rung 0 [0.5, 0.7]: index 1, keep 1 -> stopped; trial 2 replaces it
        (1, 2, 0.7, [("stop", 1, True, 0), ("create", 2, 8, 2)]),
        # rung 0 [0.5, 0.6, 0.7]: index 1, keep 1
        (2, 2, 0.6, [("stop", 2, True, 0), ("create", 3, 8, 2)]),
        # rung 1 [0.4]
        (0, 4, 0.4, [("continue", 0, None, 8, 2)]),
        # rung 0 [0.1, 0.5, 0.6, 0.7]: index 0, keep 2
        (3, 2, 0.1, [("continue", 3, None, 4, 1)]),
        # rung 1 [0.4, 0.45]: index 1, keep 1 -> stopped; 4 trials made: no new one
        (3, 4, 0.45, [("stop", 3, True, 1)]),
        # the top rung: trained to the end
        (0, 8, 0.3, [("stop", 0, False, 2)]),
    ]
    for request_id, length, metric, expected in steps:
        assert short(s.on_validation(request_id, length, metric)) == expected, (request_id, length)
    assert s.progress() == 0.0
    for request_id in (1, 2, 3, 0):
        assert s.on_closed(request_id, None) == []
    assert s.progress() == 1.0
    assert s.brackets[0].rungs == [
        [[0.1, 3], [0.5, 0], [0.6, 2], [0.7, 1]],
        [[0.4, 0], [0.45, 3]],
        [[0.3, 0]],
    ]


def test_stopping_ties_rank_the_newcomer_first() -> None:
    # Determined inserts at the first index whose value is >= the new one.
    s = new(halving())
    s.initial()
    assert short(s.on_validation(0, 2, 0.5)) == [("continue", 0, None, 4, 1)]
    assert short(s.on_validation(1, 2, 0.5)) == [("continue", 1, None, 4, 1)]


def test_stopping_validation_past_several_rungs_goes_through_each() -> None:
    s = new(halving())
    s.initial()
    # Below the decision length: nothing to decide.
    assert s.on_validation(0, 1, 0.5) == []
    # At 8 the trial is judged at 2, at 4 and at 8 in turn: first everywhere -> the top.
    assert short(s.on_validation(0, 8, 0.5)) == [("stop", 0, False, 2), ("create", 2, 8, 2)]
    assert [len(r) for r in s.brackets[0].rungs] == [1, 1, 1]
    # Past rung 0 but short of rung 2 (at 5): judged at 2 (index 1, keep 1) -> stopped there.
    assert short(s.on_validation(1, 5, 0.9)) == [("stop", 1, True, 0), ("create", 3, 8, 2)]
    # Judged at 2 ([0.2, 0.5, 0.9]: first) and 4 ([0.2, 0.5]: first), then on to 8.
    assert short(s.on_validation(2, 6, 0.2)) == [("continue", 2, None, 8, 2)]


def test_stopping_early_exit_counts_as_the_worst_value() -> None:
    s = new(halving(max_trials=5))
    s.initial()
    assert short(s.on_validation(0, 2, 0.5)) == [("continue", 0, None, 4, 1)]
    # Trial 1 fails before rung 0: it sits at the bottom of rung 0 and is replaced.
    assert short(s.on_closed(1, ERRORED)) == [("create", 2, 8, 2)]
    assert s.brackets[0].rungs[0] == [[0.5, 0], [math.inf, 1]]
    # [0.5, 0.7, inf]: index 1, keep 1.
    assert short(s.on_validation(2, 2, 0.7)) == [("stop", 2, True, 0), ("create", 3, 8, 2)]
    # [0.5, 0.6, 0.7, inf]: index 1, keep 2 -- without the failed trial's value it would be
    # [0.5, 0.6, 0.7] with keep 1, and trial 3 would be stopped.
    assert short(s.on_validation(3, 2, 0.6)) == [("continue", 3, None, 4, 1)]
    # Trial 0 is cancelled on its way to rung 2: the worst of rung 2; the last trial replaces it.
    assert short(s.on_validation(0, 4, 0.4)) == [("continue", 0, None, 8, 2)]
    assert short(s.on_closed(0, USER_STOPPED)) == [("create", 4, 8, 2)]
    assert s.brackets[0].rungs[2] == [[math.inf, 0]]
    # max_trials reached: a further failure is not replaced.
    assert s.on_closed(4, ERRORED) == []


def test_stopping_trial_failing_after_its_stop_is_not_replaced_twice() -> None:
    s = new(halving(max_trials=10))
    s.initial()
    s.on_validation(0, 2, 0.5)
    assert short(s.on_validation(1, 2, 0.7)) == [("stop", 1, True, 0), ("create", 2, 8, 2)]
    # It errors while stopping: it was already replaced (one trial per slot).
    assert s.on_closed(1, ERRORED) == []
    assert s.brackets[0].rungs[0] == [[0.5, 0], [0.7, 1]]
    # Same for one that reached the top and fails while finishing.
    assert short(s.on_validation(2, 8, 0.1)) == [("stop", 2, False, 2), ("create", 3, 8, 2)]
    assert s.on_closed(2, USER_STOPPED) == []


def test_stopping_trial_ending_without_a_final_validation_is_replaced() -> None:
    s = new(halving())
    s.initial()
    assert short(s.on_closed(0, None)) == [("create", 2, 8, 2)]


def test_invalid_hp_is_forgotten_and_replaced() -> None:
    s = new(halving(max_trials=2))
    assert short(s.initial()) == [("create", 0, 8, 2), ("create", 1, 8, 2)]
    assert short(s.on_validation(0, 2, 0.5)) == [("continue", 0, None, 4, 1)]
    assert short(s.on_validation(0, 4, 0.5)) == [("continue", 0, None, 8, 2)]
    # Invalid hyperparameters: its values leave every rung and another trial takes its place
    # (not counted against max_trials, 2).
    assert short(s.on_closed(0, INVALID_HP)) == [("create", 2, 8, 2)]
    assert s.brackets[0].rungs == [[], [], []]
    # Alone in rung 0 now: it goes on (next to 0.5 it would have been stopped).
    assert short(s.on_validation(1, 2, 0.9)) == [("continue", 1, None, 4, 1)]
    # Stopping needs a replacement no more: 2 valid trials were made.
    assert short(s.on_validation(2, 2, 0.95)) == [("stop", 2, True, 0)]
    # Invalid again (before any validation): replaced again.
    assert short(s.on_closed(1, INVALID_HP)) == [("create", 3, 8, 2)]
    assert s.on_closed(1, INVALID_HP) == []  # delivered twice
    assert s.on_validation(1, 4, 0.1) == []  # a closed trial is not judged
    assert s.on_validation(99, 2, 0.1) == []  # nor an unknown one


def test_larger_is_better_flips_the_ranking() -> None:
    s = new(halving(smaller_is_better=False))
    s.initial()
    assert short(s.on_validation(0, 2, 0.5)) == [("continue", 0, None, 4, 1)]
    # 0.4 is worse than 0.5 when larger is better...
    assert short(s.on_validation(1, 2, 0.4)) == [("stop", 1, True, 0), ("create", 2, 8, 2)]
    # ...and 0.7 the best.
    assert short(s.on_validation(2, 2, 0.7)) == [("continue", 2, None, 4, 1)]
    assert s.brackets[0].rungs[0] == [[-0.7, 2], [-0.5, 0], [-0.4, 1]]


# --- promotion (stop_once: false) ---------------------------------------------------------------


def test_promotion_hand_computed() -> None:
    """Divisor 2, rungs at 2/4/8, 6 trials, 2 at a time. Trials train to their rung and wait;
    a rung of n results promotes its best floor(n/2) waiting ones."""
    s = new(halving(stop_once=False, max_trials=6))
    assert short(s.initial()) == [("create", 0, 2, 2), ("create", 1, 2, 2)]
    steps: list[tuple[str, int, Any, list[tuple[Any, ...]]]] = [
        # rung 0 [0.5]: k = 0; trial 0 waits; a new trial takes its slot
        ("val", 0, (2, 0.5), [("create", 2, 2, 2)]),
        # [0.3, 0.5]: k = 1 -> the best (1) goes on to rung 1
        ("val", 1, (2, 0.3), [("continue", 1, 4, 4, 1)]),
        # [0.3, 0.4, 0.5]: k = 1, already promoted
        ("val", 2, (2, 0.4), [("create", 3, 2, 2)]),
        # [0.1, 0.3, 0.4, 0.5]: k = 2 -> trial 3
        ("val", 3, (2, 0.1), [("continue", 3, 4, 4, 1)]),
        # rung 1 [0.35]: k = 0
        ("val", 1, (4, 0.35), [("create", 4, 2, 2)]),
        # rung 1 [0.2, 0.35]: k = 1 -> trial 3 to the top rung
        ("val", 3, (4, 0.2), [("continue", 3, 8, 8, 2)]),
        # Trial 4 fails: the worst of rung 0 (5 results, k = 2: nobody new) -> replaced.
        ("closed", 4, ERRORED, [("create", 5, 2, 2)]),
        # Trial 5 fails: 6 results, k = 3 -> the early exit promotes trial 2 (0.4).
        ("closed", 5, ERRORED, [("continue", 2, 4, 4, 1)]),
        # The top rung: done; all 6 trials made, so no new one.
        ("val", 3, (8, 0.15), [("stop", 3, False, 2)]),
        # rung 1 [0.2, 0.35, 0.5]: k = 1, trial 3 already promoted; trial 2 waits
        ("val", 2, (4, 0.5), []),
        ("closed", 3, None, []),
    ]
    for kind, request_id, arg, expected in steps:
        ops = s.on_validation(request_id, *arg) if kind == "val" else s.on_closed(request_id, arg)
        assert short(ops) == expected, (kind, request_id, arg)
    assert s.brackets[0].rungs[0] == [
        [0.1, 3],
        [0.3, 1],
        [0.4, 2],
        [0.5, 0],
        [math.inf, 5],  # ties: the newcomer first
        [math.inf, 4],
    ]
    assert s.waiting() == {0, 1, 2}
    assert s.on_validation(0, 2, 0.0) == []  # a waiting trial is not judged twice
    # Nothing runs any more: every waiting trial is closed where it is.
    assert short(s.finish_waiting()) == [
        ("stop", 0, True, 0),
        ("stop", 1, True, 1),
        ("stop", 2, True, 1),
    ]
    assert s.waiting() == set()
    assert s.finish_waiting() == []
    for request_id in (0, 1, 2):
        assert s.on_closed(request_id, None) == []
    assert s.progress() == 1.0


def test_promotion_skips_trials_that_left_their_rung() -> None:
    s = new(halving(stop_once=False, max_trials=10))
    s.initial()
    assert short(s.on_validation(0, 2, 0.1)) == [("create", 2, 2, 2)]
    # Trial 0 is killed while waiting: it keeps its value in rung 0 but cannot be promoted;
    # a new trial starts instead.
    assert short(s.on_closed(0, USER_STOPPED)) == [("create", 3, 2, 2)]
    assert s.waiting() == set()
    # [0.1 (gone), 0.2]: k = 1 is trial 0's place: nobody is promoted.
    assert short(s.on_validation(1, 2, 0.2)) == [("create", 4, 2, 2)]
    # [0.1, 0.2, 0.3, 0.4]: k = 2 -> trial 1.
    assert short(s.on_validation(2, 2, 0.3)) == [("create", 5, 2, 2)]
    assert short(s.on_validation(3, 2, 0.4)) == [("continue", 1, 4, 4, 1)]


def test_promotion_invalid_hp_is_replaced() -> None:
    s = new(halving(stop_once=False, max_trials=2))
    s.initial()
    assert s.on_validation(0, 2, 0.5) == []  # waits; max_trials made already
    assert short(s.on_closed(0, INVALID_HP)) == [("create", 2, 2, 2)]
    assert s.waiting() == set()
    assert s.on_validation(1, 2, 0.9) == []  # alone in rung 0 again: k = 0
    assert short(s.on_validation(2, 2, 0.1)) == [("continue", 2, 4, 4, 1)]


def test_stopping_has_nothing_waiting() -> None:
    s = new(halving())
    s.initial()
    s.on_validation(0, 2, 0.5)
    s.on_validation(1, 2, 0.7)
    assert s.waiting() == set()
    assert s.finish_waiting() == []
    assert s.concurrency() is None


# --- whole searches -----------------------------------------------------------------------------


def simulate(
    cfg: dict[str, Any],
    seed: int = SEED,
    *,
    driver_seed: int = 0,
    restore_every: int | None = None,
    sign: float = 1.0,
    fail_rate: float = 0.05,
) -> tuple[list[Any], int]:
    """Run a search to its end with made-up metrics; every event and the ops it gave.

    With `restore_every`, the search continues-as-new every so many events: rebuilt from its
    snapshot after a JSON round trip, as the workflow carries it. Returns (trace, creates).
    """
    rng = random.Random(driver_seed)
    search: SearchMethod = make_search(stored_config(cfg), seed)
    running: dict[int, int] = {}  # request -> the length of its next validation
    closing: list[int] = []
    trace: list[Any] = []
    creates = 0

    def apply(ops: list[Op]) -> None:
        nonlocal creates
        trace.append([repr(op) for op in ops])
        for op in ops:
            if isinstance(op, Create):
                creates += 1
                running[op.request_id] = op.decision or op.target
            elif isinstance(op, Continue):
                assert op.decision is not None
                running[op.request_id] = op.decision  # goes on, or resumes from waiting
            elif isinstance(op, Stop):
                running.pop(op.request_id, None)
                closing.append(op.request_id)

    apply(search.initial())
    events = 0
    while running or closing or search.waiting():
        events += 1
        if restore_every and events % restore_every == 0:
            state = json.loads(json.dumps(search.snapshot()))
            search = make_search(stored_config(cfg), seed, state)
        if closing:
            request_id = closing.pop(0)
            trace.append(("closed", request_id, None))
            apply(search.on_closed(request_id, None))
        elif running:
            request_id = rng.choice(sorted(running))
            draw = rng.random()
            if draw < fail_rate:
                reason = INVALID_HP if draw < fail_rate / 2 else ERRORED
                del running[request_id]
                trace.append(("closed", request_id, reason))
                apply(search.on_closed(request_id, reason))
            else:
                length = running[request_id]
                metric = sign * round(rng.random() / math.log2(length + 1), 6)
                trace.append(("validation", request_id, length, metric))
                apply(search.on_validation(request_id, length, metric))
                if request_id in search.waiting():
                    del running[request_id]
        else:
            trace.append("finish_waiting")
            apply(search.finish_waiting())
        assert events < 100_000
    assert search.progress() == pytest.approx(1.0)
    return trace, creates


MODES = [
    pytest.param(halving(max_trials=40, num_rungs=3, max_concurrent_trials=4), id="stopping"),
    pytest.param(
        halving(max_trials=40, num_rungs=3, max_concurrent_trials=4, stop_once=False),
        id="promotion",
    ),
    pytest.param(
        config(
            "adaptive_asha",
            max_length={"batches": 64},
            divisor=2,
            max_trials=40,
            max_concurrent_trials=5,
            mode="conservative",
        ),
        id="adaptive",
    ),
    pytest.param(
        config(
            "adaptive_asha",
            max_length={"batches": 64},
            divisor=2,
            max_trials=40,
            max_concurrent_trials=5,
            stop_once=False,
        ),
        id="adaptive-promotion",
    ),
]


@pytest.mark.parametrize("cfg", MODES)
def test_max_trials_is_respected(cfg: dict[str, Any]) -> None:
    trace, creates = simulate(cfg, fail_rate=0.0)
    assert creates == 40
    trace, creates = simulate(cfg, fail_rate=0.1, driver_seed=3)
    invalid = sum(1 for e in trace if isinstance(e, tuple) and e[-1] == INVALID_HP)
    assert invalid > 0
    assert creates == 40 + invalid


@pytest.mark.parametrize("cfg", MODES)
def test_same_seed_same_search(cfg: dict[str, Any]) -> None:
    first, _ = simulate(cfg, seed=11)
    assert simulate(cfg, seed=11)[0] == first
    other, _ = simulate(cfg, seed=12)
    assert other != first  # other hyperparameters


def test_hparams_depend_on_seed_and_request_only() -> None:
    a = new(config("adaptive_asha", max_length={"batches": 64}, max_trials=30), seed=5)
    b = new(config("async_halving", max_length={"batches": 64}, num_rungs=2, max_trials=30), 5)
    ops_a = [op for op in a.initial() if isinstance(op, Create)]
    ops_b = [op for op in b.initial() if isinstance(op, Create)]
    assert [op.hparams for op in ops_a] == [op.hparams for op in ops_b][: len(ops_a)]
    assert len({json.dumps(op.hparams, sort_keys=True) for op in ops_a}) == len(ops_a)


@pytest.mark.parametrize("cfg", MODES)
def test_larger_is_better_is_smaller_is_better_negated(cfg: dict[str, Any]) -> None:
    smaller, _ = simulate(cfg)
    flipped = {**cfg, "searcher": {**cfg["searcher"], "smaller_is_better": False}}
    larger, _ = simulate(flipped, sign=-1.0)
    assert [e for e in larger if isinstance(e, list)] == [e for e in smaller if isinstance(e, list)]


@pytest.mark.parametrize("cfg", MODES)
@pytest.mark.parametrize("every", [1, 7, 50])
def test_snapshot_restore_gives_the_same_decisions(cfg: dict[str, Any], every: int) -> None:
    straight, _ = simulate(cfg, driver_seed=5)
    assert simulate(cfg, driver_seed=5, restore_every=every)[0] == straight


def test_snapshot_is_json_and_restores_mid_search() -> None:
    cfg = halving(stop_once=False, max_trials=6)
    s = new(cfg)
    s.initial()
    s.on_validation(0, 2, 0.5)
    s.on_validation(1, 2, 0.3)
    s.on_closed(2, ERRORED)
    state = json.loads(json.dumps(s.snapshot()))
    r = make_search(stored_config(cfg), SEED, state)
    assert isinstance(r, AshaSearch)
    assert r.snapshot() == s.snapshot()
    assert r.waiting() == s.waiting() == {0}
    assert r.on_validation(3, 2, 0.1) == s.on_validation(3, 2, 0.1)
    assert r.finish_waiting() == s.finish_waiting()
    assert r.snapshot() == s.snapshot()


# --- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("searcher", "errors"),
    [
        (
            {
                "name": "async_halving",
                "max_length": 8,
                "num_rungs": 3,
                "max_trials": 4,
                "divisor": 1,
            },
            ["searcher.divisor: must be > 1 (got 1)"],  # Determined's exclusiveMinimum
        ),
        (
            {"name": "adaptive_asha", "max_length": 8, "max_trials": 4, "divisor": 0.5},
            ["searcher.divisor: must be > 1 (got 0.5)"],
        ),
        (
            {"name": "async_halving", "num_rungs": 3, "max_trials": 4},
            ['searcher.max_length: field required (or "time_metric" and "max_time")'],
        ),
        (
            {"name": "adaptive_asha", "max_trials": 4},
            ['searcher.max_length: field required (or "time_metric" and "max_time")'],
        ),
        (
            {
                "name": "async_halving",
                "max_length": 8,
                "time_metric": "t",
                "max_time": 5,
                "num_rungs": 3,
                "max_trials": 4,
            },
            ['searcher: give either "max_length" or "time_metric" with "max_time", not both'],
        ),
        (
            {"name": "adaptive_asha", "time_metric": "t", "max_trials": 4},
            ['searcher.max_time: field required with "time_metric"'],
        ),
        (
            {"name": "adaptive_asha", "max_time": 5, "max_trials": 4},
            ['searcher.time_metric: field required with "max_time"'],
        ),
        (
            {"name": "async_halving", "max_length": 8, "max_trials": 4},
            ["searcher.num_rungs: field required"],
        ),
        (
            {"name": "adaptive_asha", "max_length": 8, "max_trials": 4, "num_rungs": 3},
            ['searcher.num_rungs: not a field of the "adaptive_asha" searcher'],
        ),
        (
            {
                "name": "adaptive_asha",
                "max_length": 8,
                "max_trials": 0,
                "max_rungs": 0,
                "bracket_rungs": [2, 0],
            },
            [
                "searcher.max_trials: must be >= 1 (got 0)",
                "searcher.max_rungs: must be >= 1 (got 0)",
                "searcher.bracket_rungs[1]: must be >= 1 (got 0)",
            ],
        ),
        (
            {"name": "random", "max_length": 8, "max_trials": 4, "divisor": 3},
            ['searcher.divisor: not a field of the "random" searcher'],
        ),
    ],
)
def test_config_errors(searcher: dict[str, Any], errors: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        validate_experiment_config(
            {"entrypoint": "python3 train.py", "searcher": {"metric": "loss", **searcher}}
        )
    assert info.value.errors == errors


def test_config_defaults_and_time_metric() -> None:
    cfg = validate_experiment_config(
        config("adaptive_asha", time_metric="samples", max_time=500, max_trials=9)
    )
    searcher = cfg.searcher.model_dump(mode="json")
    assert searcher["divisor"] == 4.0
    assert searcher["stop_once"] is True
    assert searcher["mode"] == "standard"
    assert searcher["max_rungs"] == 5
    assert searcher["max_concurrent_trials"] == 16
    assert searcher["max_length"] is None
    # The time metric's max_time is the full length: capped rungs 2 (log4(9) = 1.6).
    assert [b.lengths for b in new(cfg.model_dump(mode="json")).brackets] == [[125, 500], [500]]
