"""deploy/stages.py: what `make test` prints about its stages' wall time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PATH = {"PATH": "/usr/bin:/bin"}


def _stage(notes: Path, name: str, *command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "deploy.stages", "run", name, "--", *command],
                            cwd=REPO, env={"EPOCHAL_STAGES_FILE": str(notes), **PATH})


def _report(notes: Path) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "deploy.stages", "report"], cwd=REPO, check=True,
                         capture_output=True, text=True,
                         env={"EPOCHAL_STAGES_FILE": str(notes)}).stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("  ")]
    return {row[0]: float(row[1]) for row in rows}


def test_stages_run_side_by_side_total_their_wall_time_not_their_sum(tmp_path: Path) -> None:
    notes = tmp_path / "stages"
    both = [_stage(notes, "lint", "sleep", "1.5"), _stage(notes, "docker", "sleep", "1.5")]
    assert [stage.wait() for stage in both] == [0, 0]
    assert _stage(notes, "lint", "sleep", "0.5").wait() == 0
    seconds = _report(notes)
    assert seconds["lint"] == pytest.approx(2.0, abs=0.4)  # a stage's commands are summed
    assert seconds["docker"] == pytest.approx(1.5, abs=0.4)
    assert seconds["total"] == pytest.approx(2.0, abs=0.5), seconds  # not 3.5
    assert not notes.exists(), "the report forgets the stages it printed"


def test_a_failed_stage_reports_at_once_with_its_exit_status(tmp_path: Path) -> None:
    notes = tmp_path / "stages"
    failed = subprocess.run([sys.executable, "-m", "deploy.stages", "run", "lint", "--", "false"],
                            cwd=REPO, env={"EPOCHAL_STAGES_FILE": str(notes), **PATH},
                            capture_output=True, text=True)
    assert failed.returncode == 1
    assert "lint" in failed.stdout and "(exit 1)" in failed.stdout, failed.stdout
