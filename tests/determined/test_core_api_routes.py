"""Determined's own client classes (0.38.1, in the Determined venv) against a live Epochal master.

The calls are those a Core API script makes (tests/determined/det_client_calls.py), with the
trial's token sent the way Determined sends it; what they store is read back through Epochal's
API, so both clients are seen to share one set of rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.exceptions import ApplicationError

from common.tokens import mint_trial_token
from tests.integration.test_api import create, wait_for_trials
from tests.master_fixtures import CLUSTER_TOKEN, LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")

CALLS = Path(__file__).with_name("det_client_calls.py")


async def run_det_calls(det_venv: Path, env: dict[str, str]) -> dict[str, Any]:
    done = await asyncio.to_thread(
        subprocess.run,
        [str(det_venv / "python"), str(CALLS)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def test_determined_client_calls_land_in_epochal_rows(
    api: httpx.AsyncClient, live_master: LiveMaster, det_venv: Path
) -> None:
    experiment = (await create(api))["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    task_id = f"{experiment['id']}.{trial['id']}"
    checkpoint_uuid, deleted_uuid = str(uuid.uuid4()), str(uuid.uuid4())
    out = await run_det_calls(
        det_venv,
        {
            "DET_MASTER": live_master.url,
            "DET_SESSION_TOKEN": mint_trial_token(CLUSTER_TOKEN, trial["id"], trial["runId"]),
            "EPOCHAL_TEST_TRIAL_ID": str(trial["id"]),
            "EPOCHAL_TEST_EXPERIMENT_ID": str(experiment["id"]),
            "EPOCHAL_TEST_TASK_ID": task_id,
            "EPOCHAL_TEST_ALLOCATION_ID": f"{task_id}.{trial['runId']}",
            "EPOCHAL_TEST_CHECKPOINT_UUID": checkpoint_uuid,
            "EPOCHAL_TEST_DELETED_UUID": deleted_uuid,
        },
    )
    assert out["best_before"] is None  # 404 until a validation exists, as on Determined
    assert out["best_after"] == 0.75
    assert out["preempt"] is False
    assert out["checkpoint_metadata"] == {"steps_completed": 10, "note": "x"}
    assert {k: int(v) for k, v in out["checkpoint_resources"].items()} == {
        "weights.npy": 128,
        "state.json": 20,
    }

    trial_path = f"/api/v1/trials/{trial['id']}"
    metrics = (await api.get(f"{trial_path}/metrics")).json()["metrics"]
    by_group = {m["group"]: m for m in metrics}
    assert by_group["training"]["metrics"] == {"loss": 1.5}
    assert by_group["validation"]["metrics"] == {"loss": 0.75, "acc": 0.5}
    assert by_group["inference"]["metrics"] == {"latency": 0.01}
    assert {m["stepsCompleted"] for m in metrics} == {10}

    described = (await api.get(trial_path)).json()["trial"]
    assert described["progress"] == 0.25
    assert described["earlyExitReason"] == "EXITED_REASON_INVALID_HP"
    assert described["latestCheckpointUuid"] == checkpoint_uuid
    checkpoint = (await api.get(f"/api/v1/checkpoints/{checkpoint_uuid}")).json()["checkpoint"]
    assert checkpoint["training"]["trialId"] == trial["id"]
    assert checkpoint["storagePath"].endswith(f"/{checkpoint_uuid}")
    deleted = (await api.get(f"/api/v1/checkpoints/{deleted_uuid}")).json()["checkpoint"]
    assert deleted["state"] == "STATE_DELETED" and deleted["resources"] == {}

    logs = (await api.get(f"{trial_path}/logs")).text
    assert "status: warming up" in logs
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_determined_token_header_is_scoped_to_its_trial(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    experiment = (await create(api))["experiment"]
    first, second = await wait_for_trials(api, experiment["id"], 2)
    token = mint_trial_token(CLUSTER_TOKEN, first["id"], first["runId"])
    header = {"Grpc-Metadata-x-allocation-token": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=live_master.url, headers=header) as det:
        own = await det.post(f"/api/v1/trials/{first['id']}/progress",
                             json={"progress": 0.5, "is_raw": True})
        assert own.status_code == 200, own.text
        other = await det.post(f"/api/v1/trials/{second['id']}/progress",
                               json={"progress": 0.5, "is_raw": True})
        assert other.status_code == 403
        prepared = await det.post("/api/v1/runs/start", json={"runId": second["id"]})
        assert prepared.status_code == 403
        bad = await det.post(f"/api/v1/trials/{first['id']}/progress", json={"progress": 2})
        assert bad.status_code == 400 and "progress" in bad.json()["details"][0]
    async with httpx.AsyncClient(base_url=live_master.url) as anonymous:
        refused = await anonymous.post(f"/api/v1/trials/{first['id']}/progress", json=0.5)
        assert refused.status_code == 401
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_preemption_long_poll_takes_determined_parameter_name(
    api: httpx.AsyncClient,
) -> None:
    experiment = (await create(api))["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    allocation = f"{experiment['id']}.{trial['id']}.{trial['runId']}"
    path = f"/api/v1/allocations/{allocation}/signals/preemption"
    waiting = asyncio.create_task(api.get(path, params={"timeout_seconds": 20}))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    assert (await api.post(f"/api/v1/experiments/{experiment['id']}/cancel")).status_code == 200
    assert (await asyncio.wait_for(waiting, 10)).json() == {"preempt": True}
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_agent_learns_det_user_from_the_trial_token(
    api: httpx.AsyncClient, live_master: LiveMaster, tmp_path: Path
) -> None:
    """DET_USER is the experiment's owner: `GET /me` with the trial's token names them."""
    from agent_worker.process_runtime import ProcessRuntime
    from agent_worker.slots import SlotPool, cpu_slots
    from agent_worker.trial_runs import AgentActivities

    experiment = (await create(api))["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    async with httpx.AsyncClient() as http:
        acts = AgentActivities(agent_id="a", master_url=live_master.url, work_dir=tmp_path,
                               http=http, runtime=ProcessRuntime(), slots=SlotPool(cpu_slots(1)))
        token = mint_trial_token(CLUSTER_TOKEN, trial["id"], trial["runId"])
        owner = await acts.experiment_owner(live_master.url, token)
        assert owner is not None and (owner["username"], owner["id"]) == ("admin", 1)
        assert await acts.experiment_owner(live_master.url, "ept.1.forged") is None
        # Where each user's runs have their own identity, a run whose owner is unknown does
        # not start (it would share one with other users' runs); else DET_USER falls back.
        acts.runtime.per_user = True
        assert acts.run_user(owner) is not None and acts.run_user(owner).uid == 2_000_000_001
        with pytest.raises(ApplicationError, match="cannot learn who owns this run"):
            acts.run_user(None)
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")
