"""Bad input to the API gets the right 4xx with a message, and nothing stored changes."""

from __future__ import annotations

import httpx
import pytest

from tests.integration.test_api import create, wait_for_trials
from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def stored_metrics(master: LiveMaster, trial_id: int) -> int:
    return int(
        await master.pool.fetchval("SELECT count(*) FROM metrics WHERE trial_id = $1", trial_id)
    )


async def test_oversized_bodies_are_refused_whole(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    created = await create(api)
    trial = (await wait_for_trials(api, created["experiment"]["id"], 2))[0]
    huge = {"metrics": {"trialId": trial["id"], "trialRunId": 1, "stepsCompleted": 1,
                        "metrics": {"avgMetrics": {"blob": "x" * (17 * 1024 * 1024)}}},
            "group": "training"}
    declared = await api.post(f"/api/v1/trials/{trial['id']}/metrics", json=huge)
    assert declared.status_code == 413
    assert "at most 16 MiB" in declared.json()["message"]

    async def chunks():  # no Content-Length: counted as it streams
        yield b'{"metrics": {"blob": "'
        for _ in range(18):
            yield b"x" * (1024 * 1024)
        yield b'"}}'

    streamed = await api.post(
        f"/api/v1/trials/{trial['id']}/metrics",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert streamed.status_code == 413
    assert await stored_metrics(live_master, trial["id"]) == 0
    await api.post(f"/api/v1/experiments/{created['experiment']['id']}/kill")


async def test_wrong_types_and_unknown_ids_name_the_problem(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    created = await create(api)
    trial = (await wait_for_trials(api, created["experiment"]["id"], 2))[0]
    wrong = await api.post(
        f"/api/v1/trials/{trial['id']}/metrics",
        json={"metrics": {"trialId": trial["id"], "trialRunId": 1, "stepsCompleted": "ten",
                          "metrics": {"avgMetrics": {"loss": 1.0}}}, "group": "training"},
    )
    assert wrong.status_code == 400
    assert any(d.startswith("metrics.stepsCompleted:") for d in wrong.json()["details"])
    assert (await api.get("/api/v1/experiments/99999999")).status_code == 404
    assert (await api.get("/api/v1/trials/99999999")).status_code == 404
    not_a_number = await api.get("/api/v1/experiments/abc")
    assert not_a_number.status_code == 400
    assert not_a_number.json()["details"][0].startswith("experiment_id:")
    assert await stored_metrics(live_master, trial["id"]) == 0
    await api.post(f"/api/v1/experiments/{created['experiment']['id']}/kill")
