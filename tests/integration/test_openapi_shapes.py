"""The OpenAPI schema's answer shapes (api/schemas.py) hold for real answers of the live master."""

from __future__ import annotations

import uuid

import httpx
import pytest
from pydantic import BaseModel

from api.schemas import checkpoints as checkpoint_schemas
from api.schemas import experiments as experiment_schemas
from api.schemas import trials as trial_schemas
from api.schemas import users as user_schemas
from common.tokens import mint_trial_token
from tests.integration.test_api import create, wait_for_trials
from tests.master_fixtures import ADMIN_PASSWORD, LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")


def conforms(model: type[BaseModel], response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    model.model_validate(response.json())


async def test_answers_have_the_documented_shapes(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    created = await create(api)
    experiment_id = created["experiment"]["id"]
    trial = (await wait_for_trials(api, experiment_id, 2))[0]
    token = mint_trial_token(live_master.settings.cluster_token, trial["id"], trial["runId"])
    async with httpx.AsyncClient(
        base_url=live_master.url, headers={"Authorization": f"Bearer {token}"}
    ) as as_trial:
        report = {"trialId": trial["id"], "trialRunId": 1, "stepsCompleted": 10,
                  "metrics": {"avgMetrics": {"loss": 0.5}}}
        stored = await as_trial.post(
            f"/api/v1/trials/{trial['id']}/metrics",
            json={"metrics": report, "group": "validation"},
        )
        assert stored.status_code == 200, stored.text
        checkpoint = str(uuid.uuid4())
        reported = await as_trial.post(
            "/api/v1/checkpoints",
            json={"uuid": checkpoint, "taskId": f"{experiment_id}.{trial['id']}",
                  "allocationId": f"{experiment_id}.{trial['id']}.1",
                  "metadata": {"steps_completed": 10}, "resources": {"model.npz": 12}},
        )
        assert reported.status_code == 200, reported.text

    conforms(experiment_schemas.ExperimentList, await api.get("/api/v1/experiments"))
    conforms(
        experiment_schemas.ExperimentAnswer, await api.get(f"/api/v1/experiments/{experiment_id}")
    )
    trials = await api.get(f"/api/v1/experiments/{experiment_id}/trials")
    conforms(trial_schemas.TrialList, trials)
    answer = await api.get(f"/api/v1/trials/{trial['id']}")
    conforms(trial_schemas.TrialAnswer, answer)
    assert answer.json()["trial"]["bestValidation"]["totalBatches"] == 10
    conforms(
        checkpoint_schemas.CheckpointList,
        await api.get(f"/api/v1/trials/{trial['id']}/checkpoints"),
    )
    conforms(
        checkpoint_schemas.CheckpointList,
        await api.get(f"/api/v1/experiments/{experiment_id}/checkpoints"),
    )
    conforms(
        checkpoint_schemas.CheckpointAnswer, await api.get(f"/api/v1/checkpoints/{checkpoint}")
    )
    conforms(user_schemas.UserAnswer, await api.get("/api/v1/me"))
    conforms(user_schemas.UserList, await api.get("/api/v1/users"))
    async with httpx.AsyncClient(base_url=live_master.url) as anonymous:
        login = await anonymous.post(
            "/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}
        )
    conforms(user_schemas.LoginAnswer, login)
    await api.post(f"/api/v1/experiments/{experiment_id}/kill")


async def test_the_schema_names_the_answer_models(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    answer = spec["paths"]["/api/v1/trials/{trial_id}"]["get"]["responses"]["200"]
    schema = answer["content"]["application/json"]["schema"]
    assert schema["$ref"] == "#/components/schemas/TrialAnswer"
    assert {"Experiment", "Trial", "Checkpoint", "User", "Workload"} <= set(
        spec["components"]["schemas"]
    )
