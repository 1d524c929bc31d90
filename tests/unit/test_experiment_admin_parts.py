"""The pure parts behind `det preview-search`, `det trial logs`' order, log retention and
`det experiment delete-tb-files` (the commands themselves: tests/determined/
test_det_experiment_admin.py)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from activities.checkpoint_gc import delete_tensorboard_files, tensorboard_path
from activities.log_retention import run_log_retention
from api.log_stream import production_order
from api.search_preview import search_summary
from api.settings import parse_interval, parse_retention_days
from common.checkpoint_storage import CheckpointFiles
from common.expconf import validate_experiment_config


def _summary(searcher: dict[str, Any], hyperparameters: dict[str, Any] | None = None
             ) -> list[tuple[int, Any]]:
    config = validate_experiment_config({
        "entrypoint": "python3 train.py", "searcher": {"metric": "loss", **searcher},
        "hyperparameters": hyperparameters or {}})
    summary = search_summary(config)
    assert summary["config"]["name"] == searcher["name"]
    return [(t["count"], t["unit"].get("value") if not t["unit"]["maxLength"] else "max")
            for t in summary["trials"]]


def test_aggressive_asha_stops_three_quarters_of_each_rung() -> None:
    # One bracket of 3 rungs (capped by 16 trials: log4(16) + 1) at 1000/16, 1000/4 and 1000
    # batches: 16 reach the first rung, 4 go on, then 1.
    assert _summary({"name": "adaptive_asha", "max_trials": 16, "max_length": {"batches": 1000},
                     "mode": "aggressive", "divisor": 4}) == [(12, 62), (3, 250), (1, 1000)]


def test_standard_asha_splits_trials_between_brackets() -> None:
    # Brackets of 3 and 2 rungs get 12 and 4 trials (equal compute); 3 rungs: 9 stop at 62,
    # 2 at 250, 1 trains to 1000; 2 rungs (250, 1000): 3 stop at 250, 1 trains to 1000.
    rows = _summary({"name": "adaptive_asha", "max_trials": 16,
                     "max_length": {"batches": 1000}, "divisor": 4})
    assert rows == [(9, 62), (5, 250), (2, 1000)]


def test_asha_units_are_the_length_unit() -> None:
    config = validate_experiment_config({
        "entrypoint": "x", "searcher": {"name": "async_halving", "metric": "loss",
                                        "num_rungs": 2, "max_trials": 8, "divisor": 2,
                                        "max_length": {"epochs": 10}}})
    trials = search_summary(config)["trials"]
    assert trials == [
        {"count": 4, "unit": {"name": "epochs", "value": 5, "maxLength": False}},
        {"count": 4, "unit": {"name": "epochs", "value": 10, "maxLength": False}},
    ]


def test_searchers_that_decide_up_front_train_every_trial_to_completion() -> None:
    grid = {"lr": {"type": "categorical", "vals": [0.1, 0.01, 0.001]},
            "layers": {"type": "int", "minval": 1, "maxval": 2, "count": 2}}
    assert _summary({"name": "grid", "max_length": {"batches": 10}}, grid) == [(6, "max")]
    assert _summary({"name": "random", "max_trials": 7}) == [(7, "max")]
    assert _summary({"name": "single", "max_length": {"batches": 10}}) == [(1, "max")]


def test_lines_are_ordered_by_when_they_were_produced_then_by_arrival() -> None:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    # A master's status line (id 1) arrived before the batch holding the lines printed
    # before it (ids 2 and 3); two lines read in the same microsecond keep their arrival order.
    rows = [
        {"id": 1, "timestamp": start + timedelta(seconds=2), "log": "status"},
        {"id": 2, "timestamp": start, "log": "first"},
        {"id": 3, "timestamp": start + timedelta(seconds=1), "log": "second"},
        {"id": 5, "timestamp": start + timedelta(seconds=3), "log": "third"},
        {"id": 4, "timestamp": start + timedelta(seconds=3), "log": "fourth"},
    ]
    assert [r["log"] for r in production_order(rows)] == [  # type: ignore[arg-type]
        "first", "second", "status", "fourth", "third"]


async def test_log_retention_runs_at_start_then_every_interval_through_failures() -> None:
    calls: list[float] = []
    loop = asyncio.get_running_loop()

    async def delete() -> int:
        calls.append(loop.time())
        if len(calls) == 2:
            raise OSError("PostgreSQL away")
        return 3

    task = asyncio.create_task(run_log_retention(delete, 0.05))
    try:
        while len(calls) < 3:
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert calls[1] - calls[0] >= 0.045 and calls[2] - calls[1] >= 0.045


def test_cluster_retention_settings_are_bounded() -> None:
    assert parse_retention_days(None) == -1
    assert parse_retention_days("0") == 0
    assert parse_retention_days("32767") == 32767
    for bad in ("-2", "32768", "ten", "1.5"):
        with pytest.raises(ValueError, match="EPOCHAL_LOG_RETENTION_DAYS"):
            parse_retention_days(bad)
    assert parse_interval("60", 3600.0) == 60.0
    with pytest.raises(ValueError, match="EPOCHAL_LOG_RETENTION_INTERVAL_SECONDS"):
        parse_interval("0", 3600.0)


def test_tensorboard_files_go_and_nothing_else(tmp_path: Path) -> None:
    storage = tmp_path / "checkpoints"
    board = storage / tensorboard_path("epochal-local", 7) / "trial" / "9"
    board.mkdir(parents=True)
    (board / "events.out.tfevents.1").write_bytes(b"x")
    (board / "events.out.tfevents.2").write_bytes(b"y")
    other = storage / tensorboard_path("epochal-local", 8)
    other.mkdir(parents=True)
    (storage / "a-checkpoint").mkdir()
    files = CheckpointFiles({"type": "shared_fs", "host_path": str(storage)}, None)

    assert delete_tensorboard_files(files, "epochal-local", 7) == 2
    assert not (storage / tensorboard_path("epochal-local", 7)).exists()
    assert other.is_dir() and (storage / "a-checkpoint").is_dir()
    assert delete_tensorboard_files(files, "epochal-local", 7) == 0  # gone already: no error
    # A cluster id that would lead outside the storage deletes nothing.
    assert delete_tensorboard_files(files, "../..", 8) == 0
    assert other.is_dir()
