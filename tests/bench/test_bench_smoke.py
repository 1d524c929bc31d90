"""Every bench under bench/ runs end to end at its `--smoke` size, so a change that breaks a
bench fails CI; the figures are not checked (they are measured by running the benches at full
size, never asserted in tests)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import fresh_database
from tests.master_fixtures import fresh_namespace

REPO = Path(__file__).resolve().parents[2]
# Every script directly under bench/ is a bench (what they share lives in bench/common/).
SCRIPTS = sorted((REPO / "bench").glob("*.py"))
BENCHES = [p for p in SCRIPTS if "add_smoke_option(" in p.read_text()]

pytestmark = pytest.mark.slow

# Benches whose cluster takes PostgreSQL and Temporal as any cluster does (EPOCHAL_DB_URL,
# EPOCHAL_TEMPORAL_ADDRESS and _NAMESPACE): at their smoke size they use the session's servers (a
# fresh database and namespace each) instead of starting their own, as a cluster on external
# servers does. The others read their servers' processes or Temporal's default namespace.
ON_SESSION_SERVERS = {"checkpoints", "cli_latency", "hostile_input", "page_load",
                      "search_cluster", "submit_latency"}


def test_every_bench_has_a_smoke_size() -> None:
    assert SCRIPTS == BENCHES, "a bench without --smoke"
    for bench in BENCHES:  # and its usage line says so
        assert "[--smoke]" in bench.read_text(), bench.name


@contextmanager
def _servers(bench: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The environment that gives `bench` the session's servers, if it takes them."""
    if bench.stem not in ON_SESSION_SERVERS:
        yield {}
        return
    temporal_address = request.getfixturevalue("temporal_address")
    namespace = asyncio.run(fresh_namespace(temporal_address, "bench")).namespace
    with fresh_database(request.getfixturevalue("postgres_url"), "epochal_bench") as db_url:
        yield {"EPOCHAL_DB_URL": db_url, "EPOCHAL_TEMPORAL_ADDRESS": temporal_address,
               "EPOCHAL_TEMPORAL_NAMESPACE": namespace}


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.stem)
def test_the_bench_runs_at_its_smoke_size(bench: Path, request: pytest.FixtureRequest) -> None:
    if bench.stem == "container_start":
        request.getfixturevalue("task_image")  # an engine and the task image (built by make)
    with _servers(bench, request) as servers:
        result = subprocess.run([sys.executable, str(bench), "--smoke"], cwd=REPO, text=True,
                                capture_output=True, timeout=600, stdin=subprocess.DEVNULL,
                                env={**os.environ, **servers})
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{bench.name} --smoke failed:\n{output[-4000:]}"
    last = result.stdout.strip().splitlines()[-1]
    # The one-line summary: figures with units.
    assert re.search(r"\d+(\.\d+)? ?(s|ms|us|rows/s|trials/s|workflows/s|core-s|x)\b", last), last
