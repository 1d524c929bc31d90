"""Determined 0.38.1's `det resources raw|aggregated` against the allocation history of a real
local cluster (master and agent processes): two tiny experiments (a 2-slot trial and a 1-slot
one) and a command run, each recorded with its slots, user, workspace, pool and agent; `det`'s
JSON and CSV say what the stored allocations add up to, clipped per UTC day; an ordinary user
is refused and bad dates are refused with a message naming the field. Epochal's own
`epochal resources aggregated` agrees.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import yaml

from tests.determined.test_det_cli import Det, refused
from tests.e2e.cluster import Cluster, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

PASSWORD = "A-long-passw0rd"
AGENT_ID = "local-agent"
TRAIN = "import time\nprint('training', flush=True)\ntime.sleep(2)\n"


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, det_venv: Path) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "det-resources",
                                "--slots", "2") as c:
        yield c


def _det(cluster: Cluster, det_cli: Path, home: Path, user: str, password: str) -> Det:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "DET_MASTER": cluster.url,
           "PYTHONWARNINGS": "ignore", "DET_USER": user, "DET_PASS": password}
    return Det(det_cli, cluster.url, env)


@pytest.fixture(scope="module")
def det(cluster: Cluster, det_cli: Path, tmp_path_factory: pytest.TempPathFactory) -> Det:
    return _det(cluster, det_cli, tmp_path_factory.mktemp("det-admin"), "admin",
                cluster.secrets["admin_password"])


def _db(cluster: Cluster, query: str, *args: object) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(cluster.env["EPOCHAL_DB_URL"])
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    return asyncio.run(run())


def _experiment(det: Det, directory: Path, name: str, slots: int) -> int:
    model = directory / name
    model.mkdir()
    (model / "train.py").write_text(TRAIN)
    config = directory / f"{name}.yaml"
    config.write_text(yaml.safe_dump({
        "name": name, "entrypoint": "python3 train.py", "max_restarts": 0,
        "labels": ["usage-test"], "resources": {"slots_per_trial": slots},
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}))
    created = re.search(r"Created experiment (\d+)",
                        det.run("experiment", "create", str(config), str(model)).stdout)
    assert created
    return int(created.group(1))


@pytest.fixture(scope="module")
def ran(det: Det, cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What ran: a 2-slot trial, a 1-slot trial and a command, all ended."""
    directory = tmp_path_factory.mktemp("usage-models")
    experiments = [_experiment(det, directory, f"usage-{slots}", slots) for slots in (2, 1)]
    task_id = det.run("cmd", "run", "-d", "sleep 2").stdout.strip()

    def ended() -> bool:
        states = [cluster.experiment(e)["state"] for e in experiments]
        task = cluster.get(f"/commands/{task_id}")["command"]
        return all(s == "STATE_COMPLETED" for s in states) and (
            task["state"] == "STATE_TERMINATED")

    wait_for(ended, timeout=240, what="both experiments to complete and the command to end")
    trials = {e: cluster.trials(e)[0]["id"] for e in experiments}
    return {"experiments": experiments, "trials": trials, "task_id": task_id}


def _allocations(cluster: Cluster) -> list[asyncpg.Record]:
    return _db(cluster, "SELECT * FROM allocation_history ORDER BY start_time")


def _wait_closed(cluster: Cluster) -> list[asyncpg.Record]:
    """The rows, once every one has its end (a task's is written as its workflow ends)."""
    return list(wait_for(lambda: (rows := _allocations(cluster)) and all(
        r["end_time"] is not None for r in rows) and rows, timeout=60,
        what="every allocation to be closed"))


def test_each_run_and_the_command_are_stored_with_who_and_where(
    cluster: Cluster, ran: dict[str, Any],
) -> None:
    rows = _wait_closed(cluster)
    by_id = {r["allocation_id"]: r for r in rows}
    (big, small), trials = ran["experiments"], ran["trials"]
    for experiment_id, slots in ((big, 2), (small, 1)):
        row = by_id[f"{experiment_id}.{trials[experiment_id]}.1"]
        assert (row["task_type"], row["experiment_id"], row["trial_id"], row["slots"]) == (
            "TRIAL", experiment_id, trials[experiment_id], slots)
        assert row["labels"] == ["usage-test"]
    task = by_id[f"{ran['task_id']}.1"]
    assert (task["task_type"], task["experiment_id"], task["slots"]) == ("COMMAND", None, 1)
    assert len(rows) == 3
    for row in rows:
        assert row["start_time"] < row["end_time"]
        assert (row["username"], row["workspace_name"], row["resource_pool"]) == (
            "admin", "Uncategorized", "default")
        assert row["agent_ids"] == [AGENT_ID]


def _day_seconds(rows: list[asyncpg.Record]) -> dict[date, float]:
    """What the allocations add up to: (end - start) * slots, clipped to each UTC day."""
    found: dict[date, float] = {}
    for row in rows:
        start, end = row["start_time"].astimezone(UTC), row["end_time"].astimezone(UTC)
        day = start.date()
        while datetime.combine(day, datetime.min.time(), UTC) < end:
            midnight = datetime.combine(day, datetime.min.time(), UTC)
            piece = min(end, midnight + timedelta(days=1)) - max(start, midnight)
            found[day] = found.get(day, 0.0) + piece.total_seconds() * row["slots"]
            day += timedelta(days=1)
    return found


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_det_resources_aggregated_adds_up_the_allocations_per_day(
    det: Det, cluster: Cluster, ran: dict[str, Any],
) -> None:
    rows = _wait_closed(cluster)
    expected = _day_seconds(rows)
    first, last = min(expected), datetime.now(UTC).date()
    answer = json.loads(det.run("resources", "aggregated", first.isoformat(), last.isoformat(),
                                "--json").stdout)
    entries = {e["periodStart"]: e for e in answer["resourceEntries"]}
    assert set(entries) == {(first + timedelta(days=n)).isoformat()
                            for n in range((last - first).days + 1)}
    for day, seconds in expected.items():
        entry = entries[day.isoformat()]
        assert entry["period"] == "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
        assert entry["seconds"] == pytest.approx(seconds, rel=1e-6)
        assert entry["byUsername"] == {"admin": pytest.approx(seconds, rel=1e-6)}
        assert entry["byWorkspace"] == {"Uncategorized": pytest.approx(seconds, rel=1e-6)}
        assert entry["byResourcePool"] == {"default": pytest.approx(seconds, rel=1e-6)}
        trial_seconds = _day_seconds([r for r in rows if r["task_type"] == "TRIAL"]).get(
            day, 0.0)
        assert entry["byExperimentLabel"] == {
            "usage-test": pytest.approx(trial_seconds, rel=1e-6)}
    assert sum(expected.values()) > 3 * 2  # each ran for seconds

    # Without --json: Determined's CSV, the same numbers.
    csv = det.run("resources", "aggregated", first.isoformat(), last.isoformat()).stdout
    lines = csv.splitlines()
    assert lines[0] == "aggregation_type,aggregation_key,date,seconds"
    for day, seconds in expected.items():
        [total] = [line for line in lines if line.startswith(f"total,total,{day.isoformat()},")]
        assert float(total.rsplit(",", 1)[1]) == pytest.approx(seconds, rel=1e-6)
        assert f"username,admin,{day.isoformat()}," in csv

    monthly = json.loads(det.run("resources", "aggregated", "--monthly", first.strftime("%Y-%m"),
                                 last.strftime("%Y-%m"), "--json").stdout)
    assert sum(e["seconds"] for e in monthly["resourceEntries"]) == pytest.approx(
        sum(expected.values()), rel=1e-6)

    # Epochal's own CLI reads the same route.
    ours = cluster.run("resources", "aggregated", last.isoformat(), last.isoformat()).stdout
    if last in expected:
        hours = f"{expected[last] / 3600:.2f}"
        assert any(line.split()[:4] == [last.isoformat(), "total", "-", hours]
                   for line in ours.splitlines()), ours


def test_det_resources_raw_lists_each_allocation(
    det: Det, cluster: Cluster, ran: dict[str, Any],
) -> None:
    rows = _wait_closed(cluster)
    after = _stamp(min(r["start_time"] for r in rows) - timedelta(minutes=1))
    before = _stamp(datetime.now(UTC) + timedelta(minutes=1))
    answer = json.loads(det.run("resources", "raw", after, before, "--json").stdout)
    entries = {e["allocationId"]: e for e in answer["resourceEntries"]}
    assert set(entries) == {r["allocation_id"] for r in rows}
    for row in rows:
        entry = entries[row["allocation_id"]]
        held = (row["end_time"] - row["start_time"]).total_seconds()
        assert entry["seconds"] == pytest.approx(held, rel=1e-6)
        assert (entry["slots"], entry["username"], entry["resourcePool"],
                entry["agentIds"]) == (row["slots"], "admin", "default", [AGENT_ID])
        assert entry["kind"] == row["task_type"].lower()
        assert entry["experimentId"] == row["experiment_id"]
    csv = det.run("resources", "raw", after, before).stdout.splitlines()
    assert csv[0] == "experiment_id,kind,username,labels,slots,start_time,end_time,seconds"
    big = ran["experiments"][0]
    assert any(line.startswith(f"{big},trial,admin,usage-test,2,") for line in csv), csv
    allocations = det.run("resources", "allocations", after, before).stdout.splitlines()
    assert allocations[0].startswith("allocation_id,task_type,username,workspace_name")
    assert len(allocations) == 1 + len(rows)


def test_an_ordinary_user_and_bad_dates_are_refused(
    det: Det, cluster: Cluster, det_cli: Path, tmp_path: Path,
) -> None:
    name = f"user-{uuid.uuid4().hex[:8]}"
    det.run("user", "create", name, "--password", PASSWORD)
    user = _det(cluster, det_cli, tmp_path, name, PASSWORD)
    today = datetime.now(UTC).date().isoformat()
    refused(user.run("resources", "aggregated", today, today, "--json", check=False), "admins")
    refused(user.run("resources", "aggregated", today, today, check=False), "admins")
    refused(user.run("resources", "raw", "2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z",
                     "--json", check=False), "admins")

    refused(det.run("resources", "aggregated", "2025-13-01", today, "--json", check=False),
            "start_date")
    refused(det.run("resources", "aggregated", "2020-01-01", "2025-01-01", check=False),
            "end_date", "366 days")
    refused(det.run("resources", "aggregated", today, "2020-01-01", "--json", check=False),
            "end_date")
    refused(det.run("resources", "raw", "last week", "2025-01-02T00:00:00Z", "--json",
                    check=False), "timestamp_after")
    refused(det.run("resources", "raw", "2025-01-02T00:00:00Z", "2025-01-01T00:00:00Z",
                    check=False), "timestamp_before")
