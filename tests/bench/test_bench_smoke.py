"""Every bench under bench/ runs end to end at its `--smoke` size, so a change that breaks a
bench fails CI; the figures are not checked (they are measured by running the benches at full
size, never asserted in tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Every script directly under bench/ is a bench (what they share lives in bench/common/).
SCRIPTS = sorted((REPO / "bench").glob("*.py"))
BENCHES = [p for p in SCRIPTS if "add_smoke_option(" in p.read_text()]

pytestmark = pytest.mark.slow


def test_every_bench_has_a_smoke_size() -> None:
    assert SCRIPTS == BENCHES, "a bench without --smoke"
    for bench in BENCHES:  # and its usage line says so
        assert "[--smoke]" in bench.read_text(), bench.name


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.stem)
def test_the_bench_runs_at_its_smoke_size(bench: Path, request: pytest.FixtureRequest) -> None:
    if bench.stem == "container_start":
        request.getfixturevalue("task_image")  # an engine and the task image (built by make)
    result = subprocess.run([sys.executable, str(bench), "--smoke"], cwd=REPO, text=True,
                            capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{bench.name} --smoke failed:\n{output[-4000:]}"
    last = result.stdout.strip().splitlines()[-1]
    # The one-line summary: figures with units.
    assert re.search(r"\d+(\.\d+)? ?(s|ms|us|rows/s|trials/s|workflows/s|core-s|x)\b", last), last
