"""The harness against a live master: what training code reports is what the API stores and shows.

The experiment runs on a resource pool no agent serves, so its trial is created and waits; the
test plays the trial process, in a thread, with the real `harness.core`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.tokens import mint_trial_token
from harness import core
from harness.core import TrialInfo
from tests.integration.test_api import create, wait_for_trials
from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")


def trial_info(
    master: LiveMaster, experiment: dict[str, Any], trial: dict[str, Any], config: dict[str, Any]
) -> TrialInfo:
    return TrialInfo.from_dict(
        {
            "master_url": master.url,
            "experiment_id": experiment["id"],
            "trial_id": trial["id"],
            "trial_run_id": trial["runId"],
            "trial_seed": trial["seed"],
            "hparams": trial["hparams"],
            "experiment_config": config,
            "latest_checkpoint": None,
            "steps_completed": 0,
            "max_length": config["searcher"]["max_length"],
            "checkpoint_storage": config["checkpoint_storage"],
            "session_token": mint_trial_token(master.settings.cluster_token, trial["id"],
                                              trial["runId"]),
        }
    )


def train(info: TrialInfo) -> str:
    """A training loop as user code writes it: 250 training reports, 2 validations, a checkpoint."""
    with core.init(info=info) as ctx:
        for step in range(1, 251):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        ctx.train.report_validation_metrics(100, {"loss": 0.5})
        ctx.train.report_validation_metrics(250, {"loss": 0.25})
        with ctx.checkpoint.store_path({"steps_completed": 250}) as (path, storage_id):
            (Path(path) / "weights.bin").write_bytes(b"\0" * 128)
        ctx.train.report_progress(1.0)
        return storage_id


async def test_reports_reach_the_api(api: httpx.AsyncClient, live_master: LiveMaster) -> None:
    created = await create(api)
    experiment = created["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    info = trial_info(live_master, experiment, trial, created["config"])

    storage_id = await asyncio.to_thread(train, info)

    training = (
        await api.get(f"/api/v1/trials/{trial['id']}/metrics", params={"group": "training"})
    ).json()["metrics"]
    assert [m["stepsCompleted"] for m in training] == list(range(1, 251))
    assert training[-1]["metrics"] == {"loss": 1.0 / 250}
    described = (await api.get(f"/api/v1/trials/{trial['id']}")).json()["trial"]
    assert described["bestValidation"]["stepsCompleted"] == 250
    assert described["searcherMetricValue"] == 0.25
    assert described["latestCheckpointUuid"] == storage_id
    assert described["progress"] == 1.0
    checkpoint = (await api.get(f"/api/v1/checkpoints/{storage_id}")).json()["checkpoint"]
    assert checkpoint["resources"]["weights.bin"] == 128
    assert checkpoint["training"]["searcherMetric"] == 0.25
    assert Path(checkpoint["storagePath"], "weights.bin").exists()
    listed = (await api.get("/api/v1/experiments", params={"limit": 1000})).json()["experiments"]
    assert next(e for e in listed if e["id"] == experiment["id"])["bestValidation"] == 0.25
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


def wait_for_preemption(info: TrialInfo, timeout: float) -> float:
    with core.init(info=info) as ctx:
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if ctx.preempt.should_preempt():
                return time.monotonic() - start
            time.sleep(0.05)
    raise AssertionError("the harness never saw the preemption")


async def test_pause_reaches_should_preempt(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    created = await create(api)
    experiment = created["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    info = trial_info(live_master, experiment, trial, created["config"])

    waiting = asyncio.create_task(asyncio.to_thread(wait_for_preemption, info, 20))
    await asyncio.sleep(1.0)
    assert not waiting.done()
    await api.post(f"/api/v1/experiments/{experiment['id']}/pause")
    await asyncio.wait_for(waiting, 20)
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_a_report_for_an_unknown_trial_is_refused_clearly(
    live_master: LiveMaster, api: httpx.AsyncClient
) -> None:
    created = await create(api)
    experiment = created["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    info = trial_info(live_master, experiment, trial, created["config"])
    bogus = dataclasses.replace(
        info,
        trial_id=987654,
        task_id=f"{experiment['id']}.987654",
        allocation_id=f"{experiment['id']}.987654.1",
        session_token=mint_trial_token(live_master.settings.cluster_token, 987654, 1),
    )

    def report() -> None:
        with core.init(info=bogus) as ctx:
            ctx.train.report_validation_metrics(1, {"loss": 1.0})

    with pytest.raises(core.APIError, match="trial 987654, which does not exist"):
        await asyncio.to_thread(report)
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")
