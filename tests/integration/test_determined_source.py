"""The importer's reader of a Determined cluster (cli/determined_source.py) against a real
master speaking Determined's API: the session's live master, whose routes are Determined's.

Its login (hashed as Determined's client hashes), its pages (every item once, whatever the page
size), its streams (a trial's metrics in the pages GetMetrics sends, every group a trial has) and
its errors (one line naming the source's URL); then `epochal import determined --dry-run`, whose
counts are the source's paginations and which touches no target.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from cli.client import CliError
from cli.determined_source import DeterminedSource
from common.processes import free_port
from tests.integration.test_metrics_api import curve, make_trial, report
from tests.master_fixtures import ADMIN_PASSWORD, LiveMaster

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.asyncio(loop_scope="session")


def run_sync(function: Any, *args: Any) -> Any:
    """The reader is synchronous: it runs in a thread, so the live master's loop goes on."""
    return asyncio.to_thread(function, *args)


async def test_login_pages_and_streams(api: httpx.AsyncClient, live_master: LiveMaster) -> None:
    names = [f"src{uuid.uuid4().hex[:8]}" for _ in range(5)]
    for name in names:
        made = await api.post("/api/v1/users", json={"user": {"username": name},
                                                        "password": "pw-12345678"})
        assert made.status_code == 200, made.text
    trial_id = await make_trial(live_master)
    await report(api, trial_id, "training", {s: curve(s) for s in range(1, 1502)})
    await report(api, trial_id, "validation", {s: {"loss": 1.0 / s} for s in (500, 1000)})
    await report(api, trial_id, "inference", {7: {"latency": 3.0}})

    def read() -> dict[str, Any]:
        source = DeterminedSource.login(live_master.url, "admin", ADMIN_PASSWORD)
        try:
            everyone = source.get("/users", {"limit": 1000})["users"]
            paged = [u for page in source.pages("/users", "users", page=2) for u in page]
            trial = {"id": trial_id}  # as listed by a source without summaryMetrics
            return {
                "all": [u["id"] for u in everyone], "paged": [u["id"] for u in paged],
                "total": source.total("/users", "users"),
                "groups": source.metric_groups(trial),
                "training": [r["totalBatches"] for r in source.metrics(trial_id, "training")],
                "validation": list(source.metrics(trial_id, "validation")),
                "cluster": source.master().get("clusterId"),
            }
        finally:
            source.close()

    found = await run_sync(read)
    assert found["paged"] == found["all"] and len(found["all"]) == found["total"]
    assert {u["username"] for u in (await api.get(
        "/api/v1/users", params={"limit": 1000})).json()["users"]} >= set(names)
    assert found["groups"] == ["training", "validation", "inference"]
    assert found["training"] == list(range(1, 1502))
    assert [v["metrics"]["validation_metrics"]["loss"] for v in found["validation"]] == [
        1.0 / 500, 1.0 / 1000]
    assert found["cluster"]


async def test_errors_name_the_source(live_master: LiveMaster) -> None:
    def attempt(function: Any) -> str:
        try:
            function()
        except CliError as err:
            return err.message
        raise AssertionError("no error")

    wrong = await run_sync(attempt, lambda: DeterminedSource.login(
        live_master.url, "admin", "not-the-password"))
    assert live_master.url in wrong and "Traceback" not in wrong
    nowhere = f"http://127.0.0.1:{free_port()}"
    unreachable = await run_sync(attempt, lambda: DeterminedSource.login(nowhere, "admin", "x"))
    assert unreachable.startswith(f"cannot reach the Determined master at {nowhere}: ")
    bad_token = await run_sync(attempt, lambda: DeterminedSource(live_master.url, "nope").get(
        "/experiments"))
    assert live_master.url in bad_token and "401" not in bad_token.split(":")[0]
    missing = await run_sync(attempt, lambda: list(DeterminedSource(
        live_master.url, live_master.admin_token).metrics(2**31 - 1, "training")))
    assert live_master.url in missing and str(2**31 - 1) in missing


async def test_dry_run_counts_the_source_and_writes_nothing(
    api: httpx.AsyncClient, live_master: LiveMaster, tmp_path: Any
) -> None:
    await make_trial(live_master)
    # The target: nothing listens there; a dry run must not need it.
    target = f"http://127.0.0.1:{free_port()}"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "DET_PASS": ADMIN_PASSWORD,
           "EPOCHAL_AUTH_FILE": str(tmp_path / "auth.json"), "HOME": str(tmp_path)}

    async def dry_run(*args: str) -> dict[str, Any]:
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "deploy.console", "-m", target, "import", "determined",
             "--master", live_master.url, "-u", "admin", "--dry-run", "--json", *args],
            env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout))

    answer = await dry_run()
    counts = answer["counts"]
    assert answer["dryRun"] is True

    async def total(path: str) -> int:
        page = (await api.get(f"/api/v1{path}", params={"limit": 1})).json()
        return int(page["pagination"]["total"])

    assert counts["users"] == await total("/users")
    assert counts["templates"] == await total("/templates")
    experiments = await total("/experiments")
    assert counts["experiments"] + len(answer["skipped"]) == experiments
    assert all(line.startswith("experiment ") and "on the source" in line
               for line in answer["skipped"])
    assert not (tmp_path / "auth.json").exists()  # no login was made on the target
    later = await dry_run("--since", "2999-01-01T00:00:00Z")
    assert later["counts"].get("experiments", 0) == 0
    assert later["counts"]["users"] == counts["users"]
