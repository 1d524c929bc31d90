"""Interactive tasks' routes (Determined's commands, notebooks, shells and TensorBoards) over real
HTTP, with the live master's PostgreSQL and Temporal: launches store a row and start the task's
workflow, kills reach it, the agents' routes hand out launches and take logs and readiness.

Each task asks a resource pool of its own with no agent, so it waits for slots (QUEUED) until it
is killed; the tests play the agent's part over the API with the cluster token.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import subprocess
import tarfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from temporalio.client import WorkflowExecutionStatus

from common.temporal_names import TASK_WORKFLOW, TaskMessages, task_workflow_id
from tests.integration.test_api import create, model_definition
from tests.master_fixtures import LiveMaster
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")


def command_config(**fields: Any) -> dict[str, Any]:
    """A command in a pool of its own, which no agent serves: it waits for slots."""
    return {"entrypoint": ["echo hi"],
            "resources": {"resource_pool": f"ntsc-{uuid.uuid4().hex[:8]}"}, **fields}


async def launch(client: httpx.AsyncClient, kind: str = "commands",
                 **body: Any) -> dict[str, Any]:
    body.setdefault("config", command_config() if kind == "commands" else {
        "resources": {"resource_pool": f"ntsc-{uuid.uuid4().hex[:8]}"}})
    answer = await client.post(f"/api/v1/{kind}", json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest_asyncio.fixture(loop_scope="session")
async def other(live_master: LiveMaster, api: httpx.AsyncClient
                ) -> AsyncIterator[httpx.AsyncClient]:
    """A client logged in as a new ordinary user."""
    name = f"ntsc-{uuid.uuid4().hex[:8]}"
    created = await api.post("/api/v1/users", json={"user": {"username": name},
                                                    "password": "a-long-password"})
    assert created.status_code == 200, created.text
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as client:
        login = await client.post("/api/v1/auth/login",
                                  json={"username": name, "password": "a-long-password"})
        client.headers["Authorization"] = f"Bearer {login.json()['token']}"
        yield client


@pytest_asyncio.fixture(loop_scope="session")
async def agent(live_master: LiveMaster) -> AsyncIterator[httpx.AsyncClient]:
    """A client holding the cluster token, as agents do."""
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30,
                                 headers=live_master.agent_headers) as client:
        yield client


async def wait_for_state(api: httpx.AsyncClient, kind: str, task_id: str,
                         state: str) -> dict[str, Any]:
    for _ in range(300):
        item = (await api.get(f"/api/v1/{kind}/{task_id}")).json()[kind[:-1]]
        if item["state"] == state:
            return dict(item)
        await asyncio.sleep(0.1)
    raise AssertionError(f"{kind[:-1]} {task_id} never reached {state}: {item}")


async def test_a_launch_stores_the_task_and_starts_its_workflow(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    launched = await launch(api, config=command_config(idle_timeout="1h30m"))
    command = launched["command"]
    assert str(uuid.UUID(command["id"])) == command["id"]
    assert command["state"] == "STATE_QUEUED"
    assert command["description"] == "Command echo hi"
    assert command["username"] == "admin" and command["workspaceId"] == 1
    assert command["jobId"] == command["id"]
    assert launched["config"]["entrypoint"] == "echo hi"  # Determined's one-item list: sh -c
    assert launched["config"]["idle_timeout"] == 5400
    assert launched["config"]["resources"]["slots"] == 1
    assert launched["warnings"] == []

    described = await live_master.temporal.get_workflow_handle(
        task_workflow_id(command["id"])).describe()
    assert described.workflow_type == TASK_WORKFLOW
    assert described.status == WorkflowExecutionStatus.RUNNING

    got = (await api.get(f"/api/v1/commands/{command['id']}")).json()
    assert got["command"]["id"] == command["id"]
    assert got["config"] == launched["config"]
    task = (await api.get(f"/api/v1/tasks/{command['id']}")).json()["task"]
    assert task["taskType"] == "TASK_TYPE_COMMAND" and task["endTime"] is None
    assert task["allocations"] == [{
        "allocationId": f"{command['id']}.1", "taskId": command["id"], "slots": 1,
        "state": "STATE_QUEUED", "isReady": False, "startTime": None, "endTime": None,
        "exitReason": None}]
    tasks = (await api.get("/api/v1/tasks")).json()["allocationIdToSummary"]
    summary = tasks[f"{command['id']}.1"]
    assert summary["taskType"] == "TASK_TYPE_COMMAND" and summary["slotsNeeded"] == 1
    assert summary["name"] == "Command echo hi" and summary["state"] == "STATE_QUEUED"
    # Another kind's routes do not know it.
    assert (await api.get(f"/api/v1/notebooks/{command['id']}")).status_code == 404
    await api.post(f"/api/v1/commands/{command['id']}/kill")


async def test_list_get_and_kill_with_their_permissions(
    api: httpx.AsyncClient, other: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    notebook = (await launch(api, "notebooks"))["notebook"]
    assert notebook["description"] == f"JupyterLab ({notebook['id'][:8]})"
    assert notebook["serviceAddress"] == f"/proxy/{notebook['id']}/"
    mine = (await other.post("/api/v1/notebooks", json={"config": {"resources": {
        "resource_pool": f"ntsc-{uuid.uuid4().hex[:8]}"}}})).json()["notebook"]

    everyone = (await other.get("/api/v1/notebooks")).json()
    assert {notebook["id"], mine["id"]} <= {n["id"] for n in everyone["notebooks"]}
    assert everyone["pagination"]["total"] == len(everyone["notebooks"])
    own = (await other.get("/api/v1/notebooks", params={"users": mine["username"]})).json()
    assert [n["id"] for n in own["notebooks"]] == [mine["id"]]
    by_id = (await other.get("/api/v1/notebooks", params={"userIds": mine["userId"]})).json()
    assert [n["id"] for n in by_id["notebooks"]] == [mine["id"]]
    assert (await other.get(f"/api/v1/notebooks/{notebook['id']}")).status_code == 200

    refused = await other.post(f"/api/v1/notebooks/{notebook['id']}/kill")
    assert refused.status_code == 403
    assert "belongs to admin" in refused.json()["message"]
    refused = await other.post(f"/api/v1/notebooks/{notebook['id']}/set_priority",
                               json={"priority": 3})
    assert refused.status_code == 403
    changed = await api.post(f"/api/v1/notebooks/{notebook['id']}/set_priority",
                             json={"priority": 3})
    assert changed.status_code == 200, changed.text
    config = (await api.get(f"/api/v1/notebooks/{notebook['id']}")).json()["config"]
    assert config["resources"]["priority"] == 3
    bad = await api.post(f"/api/v1/notebooks/{notebook['id']}/set_priority",
                         json={"priority": 100})
    assert bad.status_code == 400 and "priority" in bad.json()["details"][0]

    killed = await api.post(f"/api/v1/notebooks/{notebook['id']}/kill")
    assert killed.status_code == 200, killed.text
    assert killed.json()["notebook"]["id"] == notebook["id"]
    handle = live_master.temporal.get_workflow_handle(task_workflow_id(notebook["id"]))

    async def kill_signaled() -> bool:
        # A signal that arrives while the workflow is in a workflow task (the priority change's)
        # is written to its history only once that task completes.
        signaled = "workflow_execution_signaled_event_attributes"
        history = await handle.fetch_history()
        return TaskMessages.KILL in [getattr(e, signaled).signal_name for e in history.events
                                     if e.HasField(signaled)]

    await eventually(kill_signaled, timeout=30, what="the kill signal in the notebook's history")
    assert (await other.post(f"/api/v1/notebooks/{mine['id']}/kill")).status_code == 200

    unknown = await api.post(f"/api/v1/commands/{uuid.uuid4()}/kill")
    assert unknown.status_code == 404
    assert (await api.get("/api/v1/commands/not-a-uuid")).status_code == 400


async def test_a_task_whose_workflow_is_gone_is_killed_in_its_row(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    command = (await launch(api))["command"]
    await live_master.temporal.get_workflow_handle(task_workflow_id(command["id"])).terminate()
    killed = await api.post(f"/api/v1/commands/{command['id']}/kill")
    assert killed.status_code == 200, killed.text
    assert killed.json()["command"]["state"] == "STATE_TERMINATED"
    assert killed.json()["command"]["exitStatus"] == "killed"
    task = (await api.get(f"/api/v1/tasks/{command['id']}")).json()["task"]
    assert task["endTime"] is not None
    again = await api.post(f"/api/v1/commands/{command['id']}/kill")
    assert again.status_code == 200  # over already: nothing to do
    late = await api.post(f"/api/v1/commands/{command['id']}/set_priority", json={"priority": 5})
    assert late.status_code == 409


async def test_bad_input_is_refused_naming_the_field_and_stores_nothing(
    api: httpx.AsyncClient
) -> None:
    before = len((await api.get("/api/v1/commands")).json()["commands"])
    cases: list[tuple[str, dict[str, Any], list[str]]] = [
        ("commands", {"config": command_config(resources={"slots": -1}, idle_timeout="soon")},
         ["resources.slots: must be >= 0", "idle_timeout: must be a duration"]),
        ("commands", {"config": {"resources": {"slots_per_trial": 2}}},
         ["resources.slots_per_trial: is an experiment's field",
          "entrypoint: field required"]),
        ("commands", {"config": command_config(bogus=1)}, ["bogus: unknown field"]),
        ("commands", {"config": command_config(), "workspaceId": 999999},
         ["workspaceId: no workspace has id 999999"]),
        ("commands", {"config": command_config(), "templateName": "no-such-template"},
         ["template: no config template is named"]),
        ("commands", {"config": command_config(), "experimentIds": [1]},
         ["experimentIds: a command does not take it"]),
        ("commands", {"config": command_config(bind_mounts=[
            {"host_path": "/etc", "container_path": "/x"}])},
         ["bind_mounts[0].host_path: /etc is outside the directories"]),
        ("notebooks", {"config": {"entrypoint": "bash"}},
         ["entrypoint: a notebook runs its own program"]),
        ("tensorboards", {"config": {}}, ["experimentIds: give experiment ids"]),
        ("tensorboards", {"config": {}, "experimentIds": [999999], "trialIds": [999998]},
         ["experimentIds: no experiment has id 999999", "trialIds: no trial has id 999998"]),
        ("commands", {"config": "entrypoint: x"}, ["config: Input should be a valid dict"]),
    ]
    for kind, body, expected in cases:
        answer = await api.post(f"/api/v1/{kind}", json=body)
        assert answer.status_code == 400, (body, answer.text)
        details = "\n".join(answer.json()["details"])
        for part in expected:
            assert part in details, (body, details)
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(40):
        inner["environment"] = {}
        inner = inner["environment"]
    answer = await api.post("/api/v1/commands", json={"config": deep})
    assert answer.status_code == 400
    assert answer.json()["details"] == ["config: nested deeper than 32 levels"]
    assert len((await api.get("/api/v1/commands")).json()["commands"]) == before


async def test_files_become_the_tasks_context_within_the_bound(
    api: httpx.AsyncClient, agent: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    files = model_definition({"data/a.txt": b"hello\n"})
    command = (await launch(api, files=files))["command"]
    context = await agent.get(f"/api/v1/tasks/{command['id']}/context")
    assert context.status_code == 200
    assert context.headers["content-type"] == "application/gzip"
    with tarfile.open(fileobj=io.BytesIO(context.content), mode="r:gz") as tar:
        member = tar.extractfile("data/a.txt")
        assert member is not None and member.read() == b"hello\n"
    assert (await api.get(f"/api/v1/tasks/{command['id']}/context")).status_code == 403
    bare = (await launch(api))["command"]
    assert (await agent.get(f"/api/v1/tasks/{bare['id']}/context")).status_code == 404

    state = live_master.app.state
    state.settings = dataclasses.replace(live_master.settings, max_model_definition_bytes=1000)
    try:
        answer = await api.post("/api/v1/commands", json={
            "config": command_config(), "files": model_definition({"big.bin": b"x" * 2000})})
    finally:
        state.settings = live_master.settings
    assert answer.status_code == 413
    assert answer.json()["details"] == ["files: at most 1,000 bytes"]
    unsafe = await api.post("/api/v1/commands", json={
        "config": command_config(), "files": model_definition({"../escape": b"x"})})
    assert unsafe.status_code == 400 and "files" in unsafe.json()["message"]
    garbled = [{"path": "a.txt", "type": 48, "content": "not base64!", "mode": 0o644}]
    answer = await api.post("/api/v1/commands", json={"config": command_config(),
                                                      "files": garbled})
    assert answer.status_code == 400 and "files" in answer.json()["message"]
    for task_id in (command["id"], bare["id"]):
        await api.post(f"/api/v1/commands/{task_id}/kill")


async def test_templates_and_tensorboards(api: httpx.AsyncClient) -> None:
    name = f"ntsc-{uuid.uuid4().hex[:8]}"
    template = {"searcher": {"name": "single", "metric": "loss"},
                "resources": {"slots_per_trial": 2, "priority": 7},
                "environment": {"environment_variables": {"FROM_TEMPLATE": "yes"}}}
    created = await api.post(f"/api/v1/templates/{name}",
                             json={"name": name, "config": template, "workspaceId": 1})
    assert created.status_code == 200, created.text
    # `det cmd run --template` sends it as template_name.
    launched = await launch(api, template_name=name)
    assert launched["config"]["resources"]["priority"] == 7
    assert launched["config"]["resources"]["slots"] == 1
    assert launched["config"]["environment"]["environment_variables"] == {"FROM_TEMPLATE": "yes"}
    await api.post(f"/api/v1/commands/{launched['command']['id']}/kill")

    experiment = (await create(api))["experiment"]
    board = (await launch(api, "tensorboards", experimentIds=[experiment["id"]]))["tensorboard"]
    assert board["experimentIds"] == [experiment["id"]] and board["trialIds"] == []
    assert board["description"] == f"TensorBoard (experiment {experiment['id']})"
    assert board["serviceAddress"] == f"/proxy/{board['id']}/"
    await api.post(f"/api/v1/tensorboards/{board['id']}/kill")
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")

    preview = await api.post("/api/v1/notebooks", json={"preview": True, "config": {
        "idle_timeout": "30m", "notebook_idle_type": "activity"}})
    assert preview.status_code == 200, preview.text
    assert preview.json()["config"]["idle_timeout"] == 1800
    assert preview.json()["configWarnings"] == [
        "notebook_idle_type: accepted and kept, but Epochal does not act on it"]
    unsaved = preview.json()["notebook"]["id"]
    assert (await api.get(f"/api/v1/notebooks/{unsaved}")).status_code == 404


async def test_shells_get_a_key_pair_only_their_owner_reads(
    api: httpx.AsyncClient, other: httpx.AsyncClient, tmp_path: Path
) -> None:
    shell = (await launch(api, "shells"))["shell"]
    assert shell["privateKey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert shell["publicKey"].startswith("ssh-ed25519 ")
    key = tmp_path / "key"
    key.write_text(shell["privateKey"])
    key.chmod(0o600)
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True,
                             text=True, timeout=30, check=True)
    assert derived.stdout.split()[:2] == shell["publicKey"].split()[:2]
    assert "user" in shell["agentUserGroup"]

    owned = (await api.get(f"/api/v1/shells/{shell['id']}")).json()["shell"]
    assert owned["privateKey"] == shell["privateKey"]
    seen = (await other.get(f"/api/v1/shells/{shell['id']}")).json()["shell"]
    assert "privateKey" not in seen and "publicKey" not in seen
    listed = (await api.get("/api/v1/shells")).json()["shells"]
    assert all("privateKey" not in s for s in listed)
    await api.post(f"/api/v1/shells/{shell['id']}/kill")


async def test_the_agents_routes_launch_and_ready(
    api: httpx.AsyncClient, agent: httpx.AsyncClient, other: httpx.AsyncClient,
    live_master: LiveMaster,
) -> None:
    notebook = (await launch(api, "notebooks"))["notebook"]
    task_id = notebook["id"]
    assert (await api.get(f"/api/v1/tasks/{task_id}/launch")).status_code == 403
    first = (await agent.get(f"/api/v1/tasks/{task_id}/launch")).json()
    assert first["taskType"] == "NOTEBOOK" and first["username"] == "admin"
    assert first["hasContext"] is False and len(first["secret"]) >= 32
    assert first["config"]["resources"]["slots"] == 1
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as code:
        as_owner = {"Authorization": f"Bearer {first['userToken']}"}
        me = await code.get("/api/v1/me", headers=as_owner)
        assert me.status_code == 200 and me.json()["user"]["username"] == "admin"
        second = (await agent.get(f"/api/v1/tasks/{task_id}/launch")).json()
        assert (await code.get("/api/v1/me", headers=as_owner)).status_code == 401
        as_owner = {"Authorization": f"Bearer {second['userToken']}"}
        assert (await code.get("/api/v1/me", headers=as_owner)).status_code == 200

        for client in (api, other):
            refused = await client.post(f"/api/v1/tasks/{task_id}/ready",
                                        json={"proxyAddress": "127.0.0.1:9"})
            assert refused.status_code == 403
        bad = await agent.post(f"/api/v1/tasks/{task_id}/ready",
                               json={"proxyAddress": "nowhere"})
        assert bad.status_code == 400 and "proxyAddress" in bad.json()["details"][0]
        ready = await agent.post(f"/api/v1/tasks/{task_id}/ready",
                                 json={"proxyAddress": "127.0.0.1:9", "user": "nobody"})
        assert ready.status_code == 200, ready.text
        task = (await api.get(f"/api/v1/tasks/{task_id}")).json()["task"]
        assert task["allocations"][0]["isReady"] is True
        assert task["allocations"][0]["state"] == "STATE_RUNNING"

        await api.post(f"/api/v1/notebooks/{task_id}/kill")
        await wait_for_state(api, "notebooks", task_id, "STATE_TERMINATED")
        # The task's session ends with it.
        assert (await code.get("/api/v1/me", headers=as_owner)).status_code == 401
    late = await agent.post(f"/api/v1/tasks/{task_id}/ready", json={"proxyAddress": None})
    assert late.status_code == 409 and task_id in late.json()["message"]
    assert (await agent.get(f"/api/v1/tasks/{task_id}/launch")).status_code == 409
    assert (await agent.get(f"/api/v1/tasks/{uuid.uuid4()}/launch")).status_code == 404


async def test_task_logs_from_the_cluster_token_read_back_and_followed_to_the_end(
    api: httpx.AsyncClient, agent: httpx.AsyncClient, other: httpx.AsyncClient
) -> None:
    command = (await launch(api))["command"]
    task_id = command["id"]

    def lines(*texts: str, level: str = "INFO") -> dict[str, Any]:
        return {"logs": [{"taskId": task_id, "allocationId": f"{task_id}.1", "agentId": "a1",
                          "stdtype": "stdout", "level": level, "log": t + "\n"}
                         for t in texts]}

    refused = await other.post("/api/v1/task/logs", json=lines("forged"))
    assert refused.status_code == 403 and "only agents" in refused.json()["message"]
    posted = await agent.post("/api/v1/task/logs", json=lines("one", "two"))
    assert posted.status_code == 200, posted.text
    await agent.post("/api/v1/task/logs", json=lines("three", level="ERROR"))
    # Lines of a task that does not exist are dropped, as a deleted trial's.
    ghost = {"logs": [{"taskId": str(uuid.uuid4()), "log": "x"}]}
    assert (await agent.post("/api/v1/task/logs", json=ghost)).status_code == 200

    async def read(**params: Any) -> list[dict[str, Any]]:
        answer = await api.get(f"/api/v1/tasks/{task_id}/logs", params=params)
        assert answer.status_code == 200, answer.text
        return [json.loads(line)["result"] for line in answer.text.splitlines()]

    every = await read()
    assert [r["log"] for r in every] == ["one\n", "two\n", "three\n"]
    assert every[0]["taskId"] == task_id and every[0]["allocationId"] == f"{task_id}.1"
    assert every[0]["message"].endswith("|| one\n") and every[0]["level"] == "LOG_LEVEL_INFO"
    assert [r["log"] for r in await read(levels="LOG_LEVEL_ERROR")] == ["three\n"]
    assert [r["log"] for r in await read(orderBy="ORDER_BY_DESC", limit=2)] == [
        "three\n", "two\n"]
    assert [r["log"] for r in await read(limit=1)] == ["one\n"]
    assert await read(rankIds=0) == []
    assert (await api.get(f"/api/v1/tasks/{uuid.uuid4()}/logs")).status_code == 404
    regex = await api.get(f"/api/v1/tasks/{task_id}/logs", params={"enableRegex": "true"})
    assert regex.status_code == 400

    async def follow() -> list[str]:
        async with api.stream("GET", f"/api/v1/tasks/{task_id}/logs",
                              params={"follow": "true"}) as response:
            return [json.loads(line)["result"]["log"] async for line in response.aiter_lines()
                    if line]

    followed = asyncio.create_task(follow())
    await asyncio.sleep(1.0)
    assert not followed.done()  # the task is not over: the stream waits for more
    await agent.post("/api/v1/task/logs", json=lines("four"))
    assert (await api.post(f"/api/v1/commands/{task_id}/kill")).status_code == 200
    assert await asyncio.wait_for(followed, 60) == ["one\n", "two\n", "three\n", "four\n"]


async def test_a_trial_task_id_answers_the_trials_logs(api: httpx.AsyncClient) -> None:
    experiment = (await create(api))["experiment"]
    trials = []
    for _ in range(200):
        trials = (await api.get(f"/api/v1/experiments/{experiment['id']}/trials")).json()[
            "trials"]
        if trials:
            break
        await asyncio.sleep(0.05)
    task_id = f"{experiment['id']}.{trials[0]['id']}"
    await api.post("/api/v1/task/logs", json={"logs": [{"taskId": task_id, "log": "trained"}]})
    answer = await api.get(f"/api/v1/tasks/{task_id}/logs")
    assert [json.loads(line)["result"]["log"] for line in answer.text.splitlines()] == [
        "trained"]
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_a_task_waiting_for_slots_is_in_the_job_queue(api: httpx.AsyncClient) -> None:
    pool_name = f"ntsc-{uuid.uuid4().hex[:8]}"
    command = (await launch(api, config=command_config(
        resources={"resource_pool": pool_name, "priority": 5})))["command"]
    jobs: list[dict[str, Any]] = []
    for _ in range(300):
        jobs = (await api.get("/api/v1/job-queues",
                              params={"resourcePool": pool_name})).json()["jobs"]
        if jobs:
            break
        await asyncio.sleep(0.1)
    assert [(j["jobId"], j["type"], j["priority"], j["requestedSlots"]) for j in jobs] == [
        (command["id"], "TYPE_COMMAND", 5, 1)]
    full = (await api.get("/api/v1/job-queues-v2",
                          params={"resourcePool": pool_name})).json()["jobs"]
    assert [(j["full"]["name"], j["full"]["username"]) for j in full] == [
        ("Command echo hi", "admin")]
    await api.post(f"/api/v1/commands/{command['id']}/kill")

