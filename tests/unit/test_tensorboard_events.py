"""harness/tensorboard.py's event files: metric reports in, TensorBoard's own reader out."""

from __future__ import annotations

import tempfile
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.util import tensor_util

from harness import tensorboard as tb

REPORTED_AT = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def report(step: int, metrics: dict[str, Any]) -> dict[str, Any]:
    return {"stepsCompleted": step, "trialRunId": 1, "reportTime": REPORTED_AT.isoformat(),
            "metrics": metrics}


def read_back(run_dir: Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar of the run as (step, value, wall time) by tag, as TensorBoard loads it."""
    accumulator = event_accumulator.EventAccumulator(
        str(run_dir), size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    return {
        tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)), e.wall_time)
              for e in accumulator.Tensors(tag)]
        for tag in accumulator.Tags()["tensors"]
    }


def test_reports_become_scalars_tagged_as_determined_tags_them(tmp_path: Path) -> None:
    run = tb.RunWriter(tmp_path / "experiment_3/trial_7")
    written = run.write(tb.TRAINING, [
        report(10, {"loss": 0.5, "accuracy": 0.25, "note": "text is not a scalar",
                    "per_class": [0.1, 0.2]}),
        report(20, {"loss": 0.25, "accuracy": 0.5, "lr": 1}),
    ])
    written += run.write(tb.VALIDATION, [
        report(20, {"loss": 0.375, "validation_error": 0.125}),
    ])
    run.close()

    assert written == 7
    scalars = read_back(tmp_path / "experiment_3/trial_7")
    assert set(scalars) == {"Determined/loss", "Determined/accuracy", "Determined/lr",
                            "Determined/val_loss", "Determined/validation_error"}
    assert [(step, value) for step, value, _ in scalars["Determined/loss"]] == [
        (10, 0.5), (20, 0.25)]
    assert [(step, value) for step, value, _ in scalars["Determined/accuracy"]] == [
        (10, 0.25), (20, 0.5)]
    assert [(step, value) for step, value, _ in scalars["Determined/val_loss"]] == [(20, 0.375)]
    assert [(step, value) for step, value, _ in scalars["Determined/validation_error"]] == [
        (20, 0.125)]
    assert scalars["Determined/lr"][0][:2] == (20, 1.0)
    assert {wall for series in scalars.values() for _, _, wall in series} == {
        REPORTED_AT.timestamp()}
    assert run.last_steps == {tb.TRAINING: 20, tb.VALIDATION: 20}


def test_a_later_write_appends_to_the_same_run(tmp_path: Path) -> None:
    run = tb.RunWriter(tmp_path / "run")
    run.write(tb.TRAINING, [report(s, {"loss": 1 / s}) for s in (1, 2, 3)])
    run.flush()
    assert [s for s, _, _ in read_back(tmp_path / "run")["Determined/loss"]] == [1, 2, 3]

    run.write(tb.TRAINING, [report(s, {"loss": 1 / s}) for s in (4, 5)])
    run.close()
    loss = read_back(tmp_path / "run")["Determined/loss"]
    assert [s for s, _, _ in loss] == [1, 2, 3, 4, 5]
    assert [v for _, v, _ in loss] == pytest.approx([1 / s for s in range(1, 6)], rel=1e-6)
    assert [v for _, v, _ in loss] == [float(np.float32(1 / s)) for s in range(1, 6)]
    assert run.last_steps == {tb.TRAINING: 5}


def test_tags_follow_determined_for_validation_names() -> None:
    assert tb.scalar_tag(tb.TRAINING, "loss") == "Determined/loss"
    assert tb.scalar_tag(tb.TRAINING, "val_loss") == "Determined/val_loss"
    assert tb.scalar_tag(tb.VALIDATION, "loss") == "Determined/val_loss"
    assert tb.scalar_tag(tb.VALIDATION, "validation_loss") == "Determined/validation_loss"
    assert tb.scalar_tag(tb.VALIDATION, "val_acc") == "Determined/val_acc"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--port", "70000"], "argument --port: expected a TCP port (1 to 65535), got '70000'"),
        (["--experiment-ids", "1,x"],
         "argument --experiment-ids: expected ids (positive integers), got 'x'"),
        (["--trial-ids", "0"], "argument --trial-ids: expected ids (positive integers), got '0'"),
        (["--refresh-seconds", "0"],
         "argument --refresh-seconds: expected seconds from 0.5 to 3600, got '0'"),
        ([], "nothing to show: give --experiment-ids or --trial-ids"),
    ],
)
def test_bad_arguments_are_named(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"--port": "6006", "--logdir": "/tmp/unused"}
    for flag, value in zip(argv[::2], argv[1::2], strict=True):
        base[flag] = value
    with pytest.raises(SystemExit) as exited:
        tb.parse_args([item for pair in base.items() for item in pair])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().endswith(f"error: {expected}")


def test_ids_are_deduplicated_and_empty_means_none() -> None:
    assert tb.id_list("3, 1,3,") == [3, 1]
    assert tb.id_list("") == []


def test_a_missing_token_is_one_line_and_a_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DET_MASTER", "http://127.0.0.1:9")
    monkeypatch.delenv("EPOCHAL_MASTER", raising=False)
    monkeypatch.delenv("DET_USER_TOKEN", raising=False)
    code = tb.main(["--port", "6006", "--logdir", str(tmp_path), "--experiment-ids", "1"])
    assert code == 1
    assert capsys.readouterr().err == (
        "harness.tensorboard: error: DET_USER_TOKEN is not set: a session token of the task's"
        " owner is needed\n")
    assert not list(tmp_path.iterdir())


def test_tensorboard_keeps_its_info_file_in_its_own_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """TensorBoard writes pid-<pid>.info under the temporary directory: under /tmp, another
    user's TensorBoard on the agent (a sandbox's pids repeat) owns that file and this one fails
    to start; so each task's is under its own work directory."""
    seen: dict[str, str] = {}

    def main(self: Any) -> int:
        seen["info"] = manager._get_info_dir()
        return 0

    monkeypatch.setattr(tempfile, "tempdir", None)  # serve's setting is undone after the test
    args = tb.parse_args(["--port", "6006", "--experiment-ids", "1",
                          "--logdir", str(tmp_path / "tensorboard")])
    with warnings.catch_warnings():  # TensorBoard's imports warn (html5lib's sanitizer)
        warnings.simplefilter("ignore", DeprecationWarning)
        from tensorboard import manager, program

        monkeypatch.setattr(program.TensorBoard, "main", main)
        assert tb.serve(args) == 0
    assert Path(seen["info"]).parent == tmp_path / "tensorboard-tmp"
