"""The REST API over real HTTP, backed by a real PostgreSQL and Temporal dev server.

Experiments here use a resource pool whose only agent is a phantom registered over the API, so
their trials are scheduled on it and then wait for it to start them; the tests play the agent's
and the harness's part over the API.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import uuid
from typing import Any

import httpx
import pytest
import yaml

from common.temporal_names import experiment_workflow_id
from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")


def config_yaml(pool_name: str | None = None, **overrides: Any) -> str:
    config: dict[str, Any] = {
        "name": "api-test",
        "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "categorical", "vals": [0.1, 0.2]}},
        "searcher": {
            "name": "grid",
            "metric": "loss",
            "max_length": {"batches": 10},
        },
        "resources": {"resource_pool": pool_name or f"nobody-{uuid.uuid4().hex[:8]}"},
    }
    config.update(overrides)
    return yaml.safe_dump(config)


def model_definition(files: dict[str, bytes]) -> list[dict[str, Any]]:
    return [
        {"path": path, "type": 48, "content": base64.b64encode(data).decode(), "mode": 0o644}
        for path, data in files.items()
    ]


async def serve_pool(api: httpx.AsyncClient, pool_name: str, slots: int = 4) -> None:
    """Register a phantom agent for the pool: the scheduler grants it runs it never starts."""
    response = await api.put(
        f"/api/v1/agents/phantom-{pool_name}",
        json={"resourcePool": pool_name, "bootId": uuid.uuid4().hex,
              "slots": [{"id": str(i), "type": "TYPE_CPU"} for i in range(slots)]},
    )
    assert response.status_code == 200, response.text


async def create(api: httpx.AsyncClient, **overrides: Any) -> dict[str, Any]:
    if overrides.get("pool_name") is None:
        overrides["pool_name"] = f"nobody-{uuid.uuid4().hex[:8]}"
        await serve_pool(api, overrides["pool_name"])
    response = await api.post(
        "/api/v1/experiments",
        json={
            "config": config_yaml(**overrides),
            "modelDefinition": model_definition({"train.py": b"print('hi')\n"}),
        },
    )
    assert response.status_code == 200, response.text
    return response.json()


async def wait_for_trials(api: httpx.AsyncClient, experiment_id: int, n: int) -> list[dict]:
    for _ in range(200):
        trials = (await api.get(f"/api/v1/experiments/{experiment_id}/trials")).json()["trials"]
        if len(trials) == n and all(t["runId"] >= 1 for t in trials):
            return trials
        await asyncio.sleep(0.05)
    raise AssertionError(f"experiment {experiment_id} never had {n} running trials")


async def test_create_then_describe_and_list(api: httpx.AsyncClient) -> None:
    created = await create(api)
    experiment = created["experiment"]
    assert experiment["state"] == "STATE_ACTIVE"
    assert created["config"]["checkpoint_storage"]["type"] == "shared_fs"
    trials = await wait_for_trials(api, experiment["id"], 2)
    assert sorted(t["hparams"]["lr"] for t in trials) == [0.1, 0.2]
    described = (await api.get(f"/api/v1/experiments/{experiment['id']}")).json()
    assert described["experiment"]["numTrials"] == 2
    assert described["config"]["searcher"]["metric"] == "loss"
    listed = (await api.get("/api/v1/experiments", params={"limit": 1000})).json()
    assert experiment["id"] in [e["id"] for e in listed["experiments"]]
    model = (await api.get(f"/api/v1/experiments/{experiment['id']}/model_def")).json()
    assert base64.b64decode(model["b64Tgz"])[:2] == b"\x1f\x8b"  # gzip
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_bad_config_lists_every_error_and_stores_nothing(api: httpx.AsyncClient) -> None:
    before = (await api.get("/api/v1/experiments", params={"limit": 1})).json()["pagination"]
    bad = {"name": "x", "searcher": {"name": "grid", "metirc": "loss"}}
    response = await api.post(
        "/api/v1/experiments", json={"config": yaml.safe_dump(bad), "modelDefinition": []}
    )
    assert response.status_code == 400
    body = response.json()
    assert body["message"] == "invalid experiment config"
    joined = "\n".join(body["details"])
    assert "entrypoint" in joined
    assert 'did you mean "metric"' in joined
    assert "searcher.metric: field required" in joined
    after = (await api.get("/api/v1/experiments", params={"limit": 1})).json()["pagination"]
    assert after["total"] == before["total"]


async def test_an_experiment_whose_workflow_cannot_start_is_not_kept(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """Its rows are committed before its workflow starts (the first trial's row refers to
    them); when Temporal refuses the start (here: a workflow holds its id), the rows are
    deleted and the answer says why."""
    next_id = await live_master.pool.fetchval(
        "SELECT last_value + CASE WHEN is_called THEN 1 ELSE 0 END FROM experiments_id_seq")
    squatter = await live_master.temporal.start_workflow(
        "NoSuchWorkflow", id=experiment_workflow_id(next_id),
        task_queue=f"nobody-{uuid.uuid4().hex[:8]}")
    try:
        response = await api.post("/api/v1/experiments", json={
            "config": config_yaml(), "modelDefinition": model_definition({"train.py": b""})})
    finally:
        await squatter.terminate("the test ended")
    assert response.status_code == 503, response.text
    assert "cannot start the experiment's workflow" in response.json()["message"]
    assert await live_master.pool.fetchval(
        "SELECT count(*) FROM experiments WHERE id = $1", next_id) == 0
    assert (await api.get(f"/api/v1/experiments/{next_id}")).status_code == 404


async def test_malformed_yaml_and_wrong_body_types(api: httpx.AsyncClient) -> None:
    response = await api.post("/api/v1/experiments", json={"config": "a: [1, 2"})
    assert response.status_code == 400
    assert response.json()["details"][0].startswith("config, line 1, column 9: ")
    response = await api.post("/api/v1/experiments", json={"config": 5})
    assert response.status_code == 400
    assert response.json()["details"] == ["config: Input should be a valid string"]


async def test_oversized_model_definition_is_refused(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    state = live_master.app.state
    state.settings = dataclasses.replace(live_master.settings, max_model_definition_bytes=1000)
    try:
        response = await api.post(
            "/api/v1/experiments",
            json={
                "config": config_yaml(),
                "modelDefinition": model_definition({"big.bin": b"x" * 2000}),
            },
        )
    finally:
        state.settings = live_master.settings
    assert response.status_code == 413
    assert ".epochalignore" in response.json()["message"]


async def test_unknown_ids_get_404_with_a_message(api: httpx.AsyncClient) -> None:
    for path in ("/api/v1/experiments/999999", "/api/v1/trials/999999"):
        response = await api.get(path)
        assert response.status_code == 404
        assert "999999" in response.json()["message"]
    response = await api.post("/api/v1/experiments/999999/pause")
    assert response.status_code == 404


async def test_metric_reports_are_idempotent(api: httpx.AsyncClient) -> None:
    experiment = (await create(api))["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    reports = [
        {
            "group": "training",
            "metrics": {
                "trialId": trial["id"],
                "trialRunId": 1,
                "stepsCompleted": step,
                "metrics": {"avgMetrics": {"loss": 1.0 / step}},
            },
        }
        for step in (1, 2, 3)
    ]
    path = f"/api/v1/trials/{trial['id']}/metrics/batch"
    for _ in range(2):  # the same batch delivered twice, as after a lost response
        response = await api.post(path, json={"reports": reports})
        assert response.json() == {"stored": 3, "preempt": False}
    stored = await api.get(f"/api/v1/trials/{trial['id']}/metrics", params={"group": "training"})
    assert [m["stepsCompleted"] for m in stored.json()["metrics"]] == [1, 2, 3]

    wrong = dict(reports[0], metrics=dict(reports[0]["metrics"], trialId=trial["id"] + 1))
    response = await api.post(path, json={"reports": [wrong]})
    assert response.status_code == 400
    assert "trialId" in response.json()["message"]
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_logs_checkpoints_and_preemption(api: httpx.AsyncClient) -> None:
    experiment = (await create(api))["experiment"]
    trial = (await wait_for_trials(api, experiment["id"], 2))[0]
    task_id = f"{experiment['id']}.{trial['id']}"
    allocation_id = f"{task_id}.{trial['runId']}"
    await api.post(
        "/api/v1/task/logs",
        json={"logs": [{"taskId": task_id, "log": f"line {i}"} for i in range(3)]},
    )
    lines = (await api.get(f"/api/v1/trials/{trial['id']}/logs")).text.splitlines()
    assert [json.loads(line)["result"]["log"] for line in lines] == ["line 0", "line 1", "line 2"]

    checkpoint_uuid = str(uuid.uuid4())
    response = await api.post(
        "/api/v1/checkpoints",
        json={
            "uuid": checkpoint_uuid,
            "taskId": task_id,
            "allocationId": allocation_id,
            "resources": {"weights.npz": 10},
            "metadata": {"steps_completed": 5},
            "training": {"trialId": trial["id"]},
        },
    )
    assert response.status_code == 200, response.text
    described = (await api.get(f"/api/v1/trials/{trial['id']}")).json()["trial"]
    assert described["latestCheckpointUuid"] == checkpoint_uuid
    listed = (await api.get(f"/api/v1/experiments/{experiment['id']}/checkpoints")).json()
    assert [c["uuid"] for c in listed["checkpoints"]] == [checkpoint_uuid]

    preemption = f"/api/v1/allocations/{allocation_id}/signals/preemption"
    quick = await api.get(preemption, params={"timeoutSeconds": 0})
    assert quick.json() == {"preempt": False}
    waiting = asyncio.create_task(api.get(preemption, params={"timeoutSeconds": 20}))
    await asyncio.sleep(0.3)
    assert not waiting.done()  # a long poll: it waits for a decision
    assert (await api.post(f"/api/v1/experiments/{experiment['id']}/pause")).status_code == 200
    answer = await asyncio.wait_for(waiting, 10)
    assert answer.json() == {"preempt": True}
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_control_of_a_finished_experiment_is_a_conflict(api: httpx.AsyncClient) -> None:
    experiment = (await create(api))["experiment"]
    await wait_for_trials(api, experiment["id"], 2)
    assert (await api.post(f"/api/v1/experiments/{experiment['id']}/kill")).status_code == 200
    for _ in range(200):
        state = (await api.get(f"/api/v1/experiments/{experiment['id']}")).json()["experiment"]
        if state["state"] == "STATE_CANCELED":
            break
        await asyncio.sleep(0.05)
    assert state["state"] == "STATE_CANCELED"
    response = await api.post(f"/api/v1/experiments/{experiment['id']}/activate")
    assert response.status_code == 409
    assert "CANCELED" in response.json()["message"]


async def test_hostile_configs_are_refused_naming_the_bound(api: httpx.AsyncClient) -> None:
    laughs = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]\n" for n in range(1, 9))
    refused = await api.post("/api/v1/experiments",
                             json={"config": laughs, "validateOnly": True})
    assert refused.status_code == 400
    assert "values once YAML aliases are expanded" in refused.json()["details"][0]
    huge = config_yaml() + "# padding\n" * 500_000  # 5 MB
    refused = await api.post("/api/v1/experiments", json={"config": huge, "modelDefinition": []})
    assert refused.status_code == 400
    assert "bytes, more than the 65,536 accepted" in refused.json()["details"][0]
    template: Any = 1
    for _ in range(40):
        template = [template]
    refused = await api.post("/api/v1/templates/deep", json={"config": {"a": template}})
    assert refused.status_code == 400 and "nested deeper than 32" in refused.json()["details"][0]
    assert (await api.get("/api/v1/experiments", params={"limit": 1})).status_code == 200
    for storage in ({"type": "shared_fs", "host_path": "/etc"},
                    {"type": "shared_fs", "host_path": "/tmp", "storage_path": "../etc/ssh"}):
        refused = await api.post("/api/v1/experiments", json={
            "config": config_yaml(checkpoint_storage=storage), "validateOnly": True})
        assert refused.status_code == 400, refused.text
        assert "is outside the directories this cluster keeps checkpoints in" in (
            refused.json()["details"][0])
    for host_path in ("/root", "/", "/tmp/../etc"):
        refused = await api.post("/api/v1/experiments", json={
            "config": config_yaml(bind_mounts=[{"host_path": host_path, "container_path": "/x"}]),
            "validateOnly": True})
        assert refused.status_code == 400, refused.text
        assert refused.json()["details"][0].startswith(
            f"bind_mounts[0].host_path: {host_path} is outside the directories this cluster lets "
            "trials mount (")
    allowed = await api.post("/api/v1/experiments", json={
        "config": config_yaml(bind_mounts=[{"host_path": "/tmp", "container_path": "/data"}]),
        "validateOnly": True})
    assert allowed.status_code == 200, allowed.text


async def test_failed_logins_are_throttled_and_unknown_names_look_alike(
    api: httpx.AsyncClient,
) -> None:
    name = f"victim-{uuid.uuid4().hex[:8]}"
    created = await api.post("/api/v1/users", json={
        "user": {"username": name, "active": True}, "password": "right-password-1"})
    assert created.status_code == 200, created.text
    for _ in range(10):
        wrong = await api.post("/api/v1/auth/login",
                               json={"username": name, "password": "wrong-password"})
        assert wrong.status_code == 401
    throttled = await api.post("/api/v1/auth/login",
                               json={"username": name, "password": "right-password-1"})
    assert throttled.status_code == 429
    assert f"too many failed logins for '{name}'" in throttled.json()["message"]
    unknown = await api.post("/api/v1/auth/login",
                             json={"username": f"nobody-{uuid.uuid4().hex[:8]}", "password": "x"})
    assert unknown.status_code == 401
    assert unknown.json()["message"] == "invalid username or password"
