"""Workspaces, projects, config templates, job queue v2, experiment resources and forks, and the
501 for Determined routes Epochal does not serve: the REST API over real HTTP with a real
PostgreSQL and Temporal dev server (the scheduler is real; the agent is a phantom)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
import yaml
from temporalio.client import Client

from api.auth import open_session
from common.temporal_names import resource_pool_workflow_id
from tests.integration.test_api import config_yaml, model_definition, serve_pool
from tests.master_fixtures import LiveMaster
from tests.waiting import eventually

pytestmark = pytest.mark.asyncio(loop_scope="session")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def create_experiment(api: httpx.AsyncClient, config: str, **body: Any) -> httpx.Response:
    return await api.post("/api/v1/experiments", json={
        "config": config, "modelDefinition": model_definition({"train.py": b"pass\n"}), **body})


async def test_the_default_workspace_and_project_exist(api: httpx.AsyncClient) -> None:
    listed = (await api.get("/api/v1/workspaces", params={"nameCaseSensitive": "Uncategorized"}))
    assert listed.status_code == 200, listed.text
    [workspace] = listed.json()["workspaces"]
    assert (workspace["id"], workspace["name"], workspace["immutable"]) == (1, "Uncategorized",
                                                                             True)
    assert listed.json()["pagination"]["total"] == 1
    projects = (await api.get("/api/v1/workspaces/1/projects")).json()["projects"]
    assert projects[0]["id"] == 1 and projects[0]["name"] == "Uncategorized"
    project = (await api.get("/api/v1/projects/1")).json()["project"]
    assert project["workspaceName"] == "Uncategorized" and project["key"] == "UNC"
    missing = await api.get("/api/v1/workspaces/999999")
    assert missing.status_code == 404 and "workspace 999999" in missing.json()["message"]


async def test_the_schema_names_the_answer_models(api: httpx.AsyncClient) -> None:
    paths = (await api.get("/openapi.json")).json()["paths"]
    for path, model in (("/api/v1/workspaces/{workspace_id}", "WorkspaceAnswer"),
                        ("/api/v1/templates", "TemplateList"),
                        ("/api/v1/models/{model_name}/versions", "ModelVersionList")):
        answer = paths[path]["get"]["responses"]["200"]["content"]["application/json"]
        assert answer["schema"]["$ref"] == f"#/components/schemas/{model}", path


async def test_workspaces_and_projects_are_created_and_hold_experiments(
    api: httpx.AsyncClient,
) -> None:
    name = unique("ws")
    created = await api.post("/api/v1/workspaces", json={"name": name})
    assert created.status_code == 200, created.text
    workspace = created.json()["workspace"]
    again = await api.post("/api/v1/workspaces", json={"name": name})
    assert again.status_code == 409 and name in again.json()["message"]
    blank = await api.post("/api/v1/workspaces", json={"name": "  "})
    assert blank.status_code == 400 and blank.json()["details"][0].startswith("name:")

    project = await api.post(f"/api/v1/workspaces/{workspace['id']}/projects",
                             json={"name": "vision", "description": "cats"})
    assert project.status_code == 200, project.text
    project_id = project.json()["project"]["id"]
    assert project.json()["project"]["workspaceId"] == workspace["id"]
    bad_key = await api.post(f"/api/v1/workspaces/{workspace['id']}/projects",
                             json={"name": "other", "key": "no way!"})
    assert bad_key.status_code == 400 and bad_key.json()["details"][0].startswith("key:")

    pool_name = unique("ws-pool")
    await serve_pool(api, pool_name)
    by_id = await create_experiment(api, config_yaml(pool_name), projectId=project_id)
    assert by_id.status_code == 200, by_id.text
    assert by_id.json()["experiment"]["projectId"] == project_id
    by_config = await create_experiment(
        api, config_yaml(pool_name, workspace=name, project="vision"))
    assert by_config.status_code == 200, by_config.text
    experiment = by_config.json()["experiment"]
    assert (experiment["projectId"], experiment["workspaceName"]) == (project_id, name)
    default = await create_experiment(api, config_yaml(pool_name))
    assert default.json()["experiment"]["projectId"] == 1

    listed = (await api.get("/api/v1/experiments", params={"projectId": project_id})).json()
    assert {e["id"] for e in listed["experiments"]} == {
        by_id.json()["experiment"]["id"], experiment["id"]}
    counted = (await api.get(f"/api/v1/projects/{project_id}")).json()["project"]
    assert counted["numExperiments"] == 2 and counted["numActiveExperiments"] == 2
    for e in (by_id, by_config, default):
        await api.post(f"/api/v1/experiments/{e.json()['experiment']['id']}/kill")


async def test_unknown_workspace_or_project_in_a_config_is_a_400_naming_it(
    api: httpx.AsyncClient,
) -> None:
    pool_name = unique("ws-pool")
    for overrides, field, named in (
        ({"workspace": "nowhere-ws", "project": "p"}, "workspace", "nowhere-ws"),
        ({"workspace": "Uncategorized", "project": "nowhere-p"}, "project", "nowhere-p"),
        ({"workspace": "Uncategorized"}, "project", "Uncategorized"),
    ):
        answer = await create_experiment(api, config_yaml(pool_name, **overrides))
        assert answer.status_code == 400, answer.text
        [detail] = answer.json()["details"]
        assert detail.startswith(f"{field}:") and named in detail
    answer = await create_experiment(api, config_yaml(pool_name), projectId=999999)
    assert answer.status_code == 400 and "projectId" in answer.json()["details"][0]


async def test_templates_are_kept_and_merged_under_the_config(api: httpx.AsyncClient) -> None:
    name = unique("tpl")
    template = {"description": "from the template", "labels": ["tpl"],
                "resources": {"slots_per_trial": 1, "priority": 7},
                "hyperparameters": {"lr": 0.5, "layers": 3}}
    created = await api.post(f"/api/v1/templates/{name}",
                             json={"name": name, "config": template, "workspaceId": 0})
    assert created.status_code == 200, created.text
    assert created.json()["template"] == {"name": name, "config": template, "workspaceId": 1}
    assert (await api.post(f"/api/v1/templates/{name}",
                           json={"name": name, "config": template})).status_code == 409
    listed = (await api.get("/api/v1/templates", params={"name": name})).json()
    assert [t["name"] for t in listed["templates"]] == [name]
    not_mapping = await api.patch(f"/api/v1/templates/{name}", json=["a list"])
    assert not_mapping.status_code == 400 and "config:" in not_mapping.json()["details"][0]

    pool_name = unique("tpl-pool")
    await serve_pool(api, pool_name)
    config = yaml.safe_load(config_yaml(pool_name, labels=["mine"]))
    answer = await create_experiment(api, yaml.safe_dump(config), template=name)
    assert answer.status_code == 200, answer.text
    merged = answer.json()["config"]
    assert merged["description"] == "from the template"  # filled in
    assert merged["labels"] == ["mine"]  # the config wins, lists are not mixed
    assert merged["resources"]["priority"] == 7
    assert merged["resources"]["resource_pool"] == pool_name  # mappings merge key by key
    assert merged["hyperparameters"]["lr"]["type"] == "categorical"  # taken whole
    assert merged["hyperparameters"]["layers"] == {"type": "const", "val": 3}
    unknown = await create_experiment(api, yaml.safe_dump(config), template="no-such-template")
    assert unknown.status_code == 400 and unknown.json() == {
        "message": "invalid request: unknown config template",  # said once, not twice
        "details": ["template: no config template is named 'no-such-template' (`epochal "
                    "template list` names them)"]}

    assert (await api.patch(f"/api/v1/templates/{name}", json={"labels": ["x"]})).json()[
        "template"]["config"] == {"labels": ["x"]}
    assert (await api.delete(f"/api/v1/templates/{name}")).status_code == 200
    gone = await api.get(f"/api/v1/templates/{name}")
    assert gone.status_code == 404 and name in gone.json()["message"]
    await api.post(f"/api/v1/experiments/{answer.json()['experiment']['id']}/kill")


async def _job(api: httpx.AsyncClient, pool_name: str, experiment_id: int) -> dict[str, Any]:
    jobs = (await api.get("/api/v1/job-queues-v2", params={"resourcePool": pool_name})).json()
    return next(j["full"] for j in jobs["jobs"] if j["full"]["entityId"] == str(experiment_id))


async def test_job_queue_v2_and_changed_priority_reorder_waiting_experiments(
    api: httpx.AsyncClient,
) -> None:
    pool_name = unique("jobs-pool")
    await serve_pool(api, pool_name, slots=1)
    ids = []
    for _ in range(3):
        answer = await create_experiment(
            api, config_yaml(pool_name, searcher={"name": "single", "metric": "loss",
                                                  "max_length": {"batches": 5}},
                             hyperparameters={"lr": 0.1}))
        assert answer.status_code == 200, answer.text
        ids.append(answer.json()["experiment"]["id"])

    async def order() -> list[str]:
        jobs = (await api.get("/api/v1/job-queues-v2",
                              params={"resourcePool": pool_name})).json()["jobs"]
        return [j["full"]["entityId"] for j in jobs]

    for _ in range(200):
        if len(await order()) == 3 and (await _job(api, pool_name, ids[0]))["allocatedSlots"]:
            break
        await asyncio.sleep(0.05)
    running, *waiting = [int(i) for i in await order()]  # waiting in the order they asked
    first = await _job(api, pool_name, running)
    assert first["summary"]["state"] == "STATE_SCHEDULED" and first["allocatedSlots"] == 1
    assert first["name"] == "api-test" and first["username"] == "admin"
    assert (await _job(api, pool_name, waiting[0]))["summary"] == {
        "state": "STATE_QUEUED", "jobsAhead": 1}

    async def eventually_ordered(expected: list[int]) -> None:
        for _ in range(200):
            if await order() == [str(i) for i in expected]:
                return
            await asyncio.sleep(0.05)
        assert await order() == [str(i) for i in expected]

    bad = await api.patch(f"/api/v1/experiments/{waiting[1]}",
                          json={"resources": {"priority": 0}})
    assert bad.status_code == 400 and "resources.priority" in bad.json()["details"][0]
    changed = await api.patch(f"/api/v1/experiments/{waiting[1]}",
                              json={"id": waiting[1], "resources": {"priority": 5}})
    assert changed.status_code == 200, changed.text
    assert changed.json()["experiment"]["config"]["resources"]["priority"] == 5
    await eventually_ordered([running, waiting[1], waiting[0]])
    assert (await _job(api, pool_name, waiting[1]))["priority"] == 5

    # `det job update` sends the same change through the job queue.
    updated = await api.post("/api/v1/job-queues", json={
        "updates": [{"jobId": f"experiment-{waiting[0]}", "priority": 1}]})
    assert updated.status_code == 200, updated.text
    await eventually_ordered([running, waiting[0], waiting[1]])
    pools = (await api.get("/api/v1/resource-pools")).json()["resourcePools"]
    assert {"default", pool_name} <= {p["name"] for p in pools}
    for experiment_id in ids:
        await api.post(f"/api/v1/experiments/{experiment_id}/kill")


async def test_a_configs_weight_reaches_the_scheduler(
    api: httpx.AsyncClient, temporal_client: Client
) -> None:
    """`resources.weight` in the config is kept as `det experiment set weight` keeps it."""
    pool_name = unique("weight-pool")
    await serve_pool(api, pool_name, slots=1)
    config = yaml.safe_load(config_yaml(pool_name, searcher={"name": "single", "metric": "loss"},
                                        hyperparameters={"lr": 0.1}))
    config["resources"]["weight"] = 3
    answer = await create_experiment(api, yaml.safe_dump(config))
    assert answer.status_code == 200, answer.text
    assert not any("weight" in w for w in answer.json()["configWarnings"])
    experiment_id = answer.json()["experiment"]["id"]
    handle = temporal_client.get_workflow_handle(resource_pool_workflow_id(pool_name))
    kept = (await handle.query("describe"))["experimentResources"]
    assert [(r["experiment_id"], r["weight"]) for r in kept] == [(experiment_id, 3.0)]
    await api.post(f"/api/v1/experiments/{experiment_id}/kill")


async def test_a_fork_reuses_the_parents_model_definition(api: httpx.AsyncClient) -> None:
    pool_name = unique("fork-pool")
    await serve_pool(api, pool_name)
    parent = (await create_experiment(api, config_yaml(pool_name))).json()["experiment"]
    fork = await api.post("/api/v1/experiments", json={
        "config": config_yaml(pool_name, name="forked"), "parentId": parent["id"]})
    assert fork.status_code == 200, fork.text
    child = fork.json()["experiment"]
    assert child["forkedFrom"] == parent["id"] and child["name"] == "forked"
    parent_def = (await api.get(f"/api/v1/experiments/{parent['id']}/model_def")).json()
    child_def = (await api.get(f"/api/v1/experiments/{child['id']}/model_def")).json()
    assert child_def == parent_def
    orphan = await api.post("/api/v1/experiments", json={
        "config": config_yaml(pool_name), "parentId": 999999})
    assert orphan.status_code == 400 and "parentId" in orphan.json()["details"][0]
    for experiment in (parent, child):
        await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_routes_epochal_does_not_serve_answer_501_naming_the_feature(
    api: httpx.AsyncClient,
) -> None:
    for method, path, words in (
        ("GET", "/api/v1/generic-tasks", "generic tasks are not served by Epochal"),
        ("GET", "/api/v1/webhooks", "webhooks"),
        ("GET", "/api/v1/groups/3", "user groups"),
        ("GET", "/api/v1/experiments/1/validation-history",
         "experiments/{id}/validation-history"),
        # A path another method's route matches is still the feature's 501, not a 405.
        ("POST", "/api/v1/checkpoints/rm", "checkpoint storage removal"),
    ):
        answer = await api.request(method, path)
        assert answer.status_code == 501, (path, answer.text)
        assert words in answer.json()["message"]
        assert answer.json()["error"]["error"] == answer.json()["message"]
    assert (await api.get("/api/v1/experiments/999999")).status_code == 404


async def test_workspaces_and_projects_are_edited_archived_and_deleted(
    api: httpx.AsyncClient,
) -> None:
    workspace = (await api.post("/api/v1/workspaces", json={"name": unique("ed")})).json()[
        "workspace"]
    renamed = unique("renamed")
    patched = await api.patch(f"/api/v1/workspaces/{workspace['id']}", json={"name": renamed})
    assert patched.status_code == 200 and patched.json()["workspace"]["name"] == renamed
    project = (await api.post(f"/api/v1/workspaces/{workspace['id']}/projects",
                              json={"name": "p", "key": "ED1"})).json()["project"]
    edited = await api.patch(f"/api/v1/projects/{project['id']}",
                             json={"description": "now described"})
    assert edited.json()["project"]["description"] == "now described"
    assert (await api.post(f"/api/v1/projects/{project['id']}/archive")).status_code == 200
    assert (await api.get(f"/api/v1/projects/{project['id']}")).json()["project"]["archived"]
    assert (await api.post(f"/api/v1/projects/{project['id']}/unarchive")).status_code == 200

    pool_name = unique("ed-pool")
    await serve_pool(api, pool_name)
    experiment = (await create_experiment(api, config_yaml(pool_name),
                                          projectId=project["id"])).json()["experiment"]
    refused = await api.delete(f"/api/v1/workspaces/{workspace['id']}")
    assert refused.status_code == 409 and "holds 1 experiments" in refused.json()["message"]
    moved = await api.post(f"/api/v1/experiments/{experiment['id']}/move",
                           json={"destinationProjectId": 1, "experimentId": experiment["id"]})
    assert moved.status_code == 200, moved.text
    assert (await api.get(f"/api/v1/experiments/{experiment['id']}")).json()["experiment"][
        "projectId"] == 1
    deleted = await api.delete(f"/api/v1/workspaces/{workspace['id']}")
    assert deleted.status_code == 200 and deleted.json() == {"completed": True}
    assert (await api.get(f"/api/v1/projects/{project['id']}")).status_code == 404

    for method, path in (("PATCH", "/api/v1/workspaces/1"), ("DELETE", "/api/v1/projects/1"),
                         ("POST", "/api/v1/workspaces/1/archive")):
        default = await api.request(method, path, json={"name": "x"})
        assert default.status_code == 409 and "default" in default.json()["message"]
    wrong_method = await api.put("/api/v1/workspaces/1")
    assert wrong_method.status_code == 405 and "GET" in wrong_method.headers["allow"]
    assert wrong_method.json()["message"].startswith("PUT /api/v1/workspaces/1")
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_another_user_cannot_change_a_template_workspace_or_project_and_reads_no_secret(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """The finding: B PUT `PYTHONPATH=<B's directory>` into A's template, and A's next
    experiment ran B's code. Templates, workspaces and projects are their creator's."""
    clients = []
    for name in ("a", "b"):
        username = f"{name}-{uuid.uuid4().hex[:8]}"
        created = await api.post("/api/v1/users", json={"user": {"username": username},
                                                        "password": "a-long-password"})
        token = await open_session(live_master.pool, created.json()["user"]["id"],
                                   timedelta(minutes=5))
        clients.append(httpx.AsyncClient(base_url=live_master.url,
                                         headers={"Authorization": f"Bearer {token}"}))
    a, b = clients
    async with a, b:
        template = f"team-{uuid.uuid4().hex[:8]}"
        config = {"environment": {"environment_variables": ["WANDB_API_KEY=a-secret-of-a"]}}
        assert (await a.post(f"/api/v1/templates/{template}",
                             json={"name": template, "config": config})).status_code == 200
        hijack = {"environment": {"environment_variables": ["PYTHONPATH=/shared/b"]}}
        put = await b.put(f"/api/v1/templates/{template}", json={"name": template,
                                                                 "config": hijack})
        assert put.status_code == 403 and "belongs to" in put.json()["message"]
        assert (await b.patch(f"/api/v1/templates/{template}", json=hijack)).status_code == 403
        assert (await b.delete(f"/api/v1/templates/{template}")).status_code == 403
        shown = (await b.get(f"/api/v1/templates/{template}")).json()["template"]
        assert shown["config"]["environment"]["environment_variables"] == [
            "WANDB_API_KEY=********"]
        stored = await live_master.pool.fetchval(
            "SELECT config FROM templates WHERE name = $1", template)
        assert stored == config  # unchanged, secret kept for A's runs

        workspace = (await a.post("/api/v1/workspaces", json={"name": template})).json()
        workspace_id = workspace["workspace"]["id"]
        assert (await b.patch(f"/api/v1/workspaces/{workspace_id}",
                              json={"name": "taken"})).status_code == 403
        assert (await b.post(f"/api/v1/workspaces/{workspace_id}/projects",
                             json={"name": "b's", "workspaceId": workspace_id})).status_code == 403
        project = (await a.post(f"/api/v1/workspaces/{workspace_id}/projects",
                                json={"name": "a's", "workspaceId": workspace_id})).json()
        project_id = project["project"]["id"]
        assert (await b.delete(f"/api/v1/projects/{project_id}")).status_code == 403
        assert (await b.post(f"/api/v1/workspaces/{workspace_id}/archive")).status_code == 403
        assert (await b.delete(f"/api/v1/workspaces/{workspace_id}")).status_code == 403
        assert (await a.delete(f"/api/v1/projects/{project_id}")).status_code == 200


async def test_job_update_moves_a_waiting_experiment_to_another_pool(
    api: httpx.AsyncClient,
) -> None:
    """UpdateJobQueue's `resourcePool`: the experiment's waiting request leaves the old pool's
    queue for the new one's, and its stored config names the new pool; a pool that does not
    exist, one bound to other workspaces only and an ended job are refused, naming
    resourcePool."""
    full, other = unique("move-full"), unique("move-to")
    await serve_pool(api, full, slots=2)
    await serve_pool(api, other, slots=2)
    searcher = {"name": "single", "metric": "loss", "max_length": {"batches": 5}}

    async def submit() -> int:
        answer = await create_experiment(
            api, config_yaml(full, searcher=searcher, hyperparameters={"lr": 0.1},
                             resources={"resource_pool": full, "slots_per_trial": 2}))
        assert answer.status_code == 200, answer.text
        return int(answer.json()["experiment"]["id"])

    async def in_state(pool_name: str, state: str) -> list[int]:
        jobs = (await api.get("/api/v1/job-queues", params={"resourcePool": pool_name})).json()
        return [int(j["entityId"]) for j in jobs["jobs"] if j["summary"]["state"] == state]

    async def eventually_queued(pool_name: str, expected: list[int]) -> None:
        async def queued() -> bool:
            return await in_state(pool_name, "STATE_QUEUED") == expected

        await eventually(queued, 30, f"{expected} waiting in {pool_name}")

    async def update(experiment_id: int, pool_name: str) -> httpx.Response:
        return await api.post("/api/v1/job-queues", json={
            "updates": [{"jobId": f"experiment-{experiment_id}", "resourcePool": pool_name}]})

    def refused_naming(answer: httpx.Response, *words: str) -> None:
        assert answer.status_code == 400, answer.text
        assert any(d.startswith("resourcePool:") and all(w in d for w in words)
                   for d in answer.json()["details"]), answer.json()

    # The holder takes the pool's slots before the other is submitted: two submitted together
    # reach the pool in either order.
    holder = await submit()

    async def holding() -> bool:
        return await in_state(full, "STATE_SCHEDULED") == [holder]

    await eventually(holding, 30, f"experiment {holder} holding pool {full}")
    moved = await submit()
    await eventually_queued(full, [moved])
    refused_naming(await update(moved, "no-such-pool"), "no resource pool", "no-such-pool")
    workspace = (await api.post("/api/v1/workspaces", json={"name": unique("ws")})).json()
    bindings = f"/api/v1/resource-pools/{other}/workspace-bindings"
    bound = await api.post(bindings, json={"workspaceIds": [workspace["workspace"]["id"]]})
    assert bound.status_code == 200, bound.text
    refused_naming(await update(moved, other), other, workspace["workspace"]["name"])
    unbound = await api.request("DELETE", bindings,
                                json={"workspaceIds": [workspace["workspace"]["id"]]})
    assert unbound.status_code == 200, unbound.text
    config = (await api.get(f"/api/v1/experiments/{moved}")).json()["experiment"]["config"]
    assert config["resources"]["resource_pool"] == full  # nothing refused changed it

    moved_answer = await update(moved, other)
    assert moved_answer.status_code == 200, moved_answer.text
    config = (await api.get(f"/api/v1/experiments/{moved}")).json()["experiment"]["config"]
    assert config["resources"]["resource_pool"] == other
    await eventually_queued(full, [])

    async def only_moved_in_other() -> bool:
        answer = await api.get("/api/v1/job-queues", params={"resourcePool": other})
        return [j["entityId"] for j in answer.json()["jobs"]] == [str(moved)]

    # Its request leaves the old pool before it reaches the new one (granted there: a phantom
    # agent): the second step is waited for too.
    await eventually(only_moved_in_other, 10, f"experiment {moved} alone in pool {other}")

    await api.post(f"/api/v1/experiments/{holder}/kill")
    for _ in range(200):
        if (await api.get(f"/api/v1/experiments/{holder}")).json()["experiment"][
                "state"] == "STATE_CANCELED":
            break
        await asyncio.sleep(0.05)
    refused_naming(await update(holder, other), "has ended")
    await api.post(f"/api/v1/experiments/{moved}/kill")
