"""The model registry over real HTTP (Determined's routes and shapes): models, versions, who may
change them, and what registering a checkpoint protects (GC, experiment deletion).
`det model ...` itself runs in tests/determined/test_det_cli.py."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_api import create, wait_for_trials
from tests.integration.test_auth import bearer, ordinary  # noqa: F401 (a fixture)
from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def new_model(api: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    answer = await api.post("/api/v1/models", json={"name": unique("model"), **body})
    assert answer.status_code == 200, answer.text
    return dict(answer.json()["model"])


async def report_checkpoint(api: httpx.AsyncClient, live_master: LiveMaster,
                            trial: dict[str, Any], steps: int) -> tuple[str, Path]:
    """A checkpoint reported as the harness reports one, with a file in its directory."""
    checkpoint = str(uuid.uuid4())
    reported = await api.post(
        "/api/v1/checkpoints", headers=live_master.agent_headers,
        json={"uuid": checkpoint, "taskId": trial["taskId"], "resources": {"w.bin": 3},
              "metadata": {"steps_completed": steps}})
    assert reported.status_code == 200, reported.text
    stored = Path((await api.get(f"/api/v1/checkpoints/{checkpoint}")).json()["checkpoint"][
        "storagePath"])
    stored.mkdir(parents=True)
    (stored / "w.bin").write_bytes(b"abc")
    return checkpoint, stored


async def test_models_are_created_found_changed_and_deleted(api: httpx.AsyncClient) -> None:
    tag = uuid.uuid4().hex[:8]
    first = await new_model(api, name=f"Resnet-{tag}", description="image classifier",
                            metadata={"team": "vision", "deep": {"er": [1, 2]}},
                            labels=["prod", "cv"], notes="first")
    assert (first["numVersions"], first["workspaceId"], first["username"]) == (0, 1, "admin")
    assert first["metadata"] == {"team": "vision", "deep": {"er": [1, 2]}}
    second = await new_model(api, name=f"bert-{tag}", labels=["nlp"])

    for name, field_text in (("", "blank"), ("  ", "blank"), ("12345", "digits"),
                             ("a/b", "slashes"), ("a  b", "two spaces"), ("x" * 256, "255")):
        bad = await api.post("/api/v1/models", json={"name": name})
        assert bad.status_code == 400 and field_text in bad.json()["details"][0], bad.text
    again = await api.post("/api/v1/models", json={"name": f"Resnet-{tag}"})
    assert again.status_code == 409 and "already exists" in again.json()["message"]
    too_deep: dict[str, Any] = {}
    for _ in range(40):
        too_deep = {"a": too_deep}
    deep = await api.post("/api/v1/models", json={"name": unique("deep"), "metadata": too_deep})
    assert deep.status_code == 400 and deep.json()["details"][0].startswith("metadata:")
    many = await api.post("/api/v1/models", json={"name": unique("lab"), "labels": ["x"] * 101})
    assert many.status_code == 400 and many.json()["details"][0].startswith("labels:")
    nowhere = await api.post("/api/v1/models", json={"name": unique("ws"),
                                                     "workspaceName": "no-such-workspace"})
    assert nowhere.status_code == 400 and nowhere.json()["details"][0].startswith("workspaceName")

    by_name = (await api.get(f"/api/v1/models/Resnet-{tag}")).json()["model"]
    by_id = (await api.get(f"/api/v1/models/{first['id']}")).json()["model"]
    assert by_name == by_id == first
    missing = await api.get(f"/api/v1/models/nothing-{tag}")
    assert missing.status_code == 404 and f"nothing-{tag}" in missing.json()["message"]

    listed = (await api.get("/api/v1/models", params={"name": tag.upper(),
                                                      "sortBy": "SORT_BY_NAME"})).json()
    assert [m["name"] for m in listed["models"]] == [f"Resnet-{tag}", f"bert-{tag}"]
    assert listed["pagination"]["total"] == 2
    labelled = (await api.get("/api/v1/models", params={"name": tag, "labels": ["prod"]})).json()
    assert [m["id"] for m in labelled["models"]] == [first["id"]]
    page = (await api.get("/api/v1/models", params={"name": tag, "sortBy": "SORT_BY_NAME",
                                                    "orderBy": "ORDER_BY_DESC",
                                                    "limit": 1, "offset": 1})).json()
    assert [m["id"] for m in page["models"]] == [first["id"]]
    assert (page["pagination"]["endIndex"], page["pagination"]["total"]) == (2, 2)
    bad_sort = await api.get("/api/v1/models", params={"sortBy": "SORT_BY_SIZE"})
    assert bad_sort.status_code == 400 and bad_sort.json()["details"][0].startswith("sortBy:")
    assert "prod" in (await api.get("/api/v1/model/labels")).json()["labels"]

    patched = await api.patch(f"/api/v1/models/{second['id']}",
                              json={"description": "transformer", "labels": ["nlp", "prod"],
                                    "name": f"Bert-{tag}"})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["model"]["name"], patched.json()["model"]["description"]) == (
        f"Bert-{tag}", "transformer")
    clash = await api.patch(f"/api/v1/models/Bert-{tag}", json={"name": f"Resnet-{tag}"})
    assert clash.status_code == 409

    workspace = (await api.post("/api/v1/workspaces", json={"name": unique("reg")})).json()[
        "workspace"]
    nowhere = await api.post(f"/api/v1/models/Bert-{tag}/move",
                             json={"destinationWorkspaceId": 0})
    assert nowhere.status_code == 400 and "destinationWorkspaceId" in nowhere.text
    moved = await api.post(f"/api/v1/models/Bert-{tag}/move",
                           json={"destinationWorkspaceId": workspace["id"],
                                 "modelName": f"Bert-{tag}"})
    assert moved.status_code == 200, moved.text
    in_workspace = (await api.get("/api/v1/models",
                                  params={"workspaceNames": [workspace["name"]]})).json()
    assert [m["id"] for m in in_workspace["models"]] == [second["id"]]
    holding = await api.delete(f"/api/v1/workspaces/{workspace['id']}")
    assert holding.status_code == 409 and "1 models" in holding.json()["message"]

    assert (await api.post(f"/api/v1/models/{first['id']}/archive")).status_code == 200
    assert (await api.get(f"/api/v1/models/{first['id']}")).json()["model"]["archived"] is True
    archived = (await api.get("/api/v1/models", params={"name": tag, "archived": "false"}))
    assert [m["id"] for m in archived.json()["models"]] == [second["id"]]
    assert (await api.post(f"/api/v1/models/{first['id']}/unarchive")).status_code == 200

    for model in (first, second):
        assert (await api.delete(f"/api/v1/models/{model['id']}")).status_code == 200
        assert (await api.get(f"/api/v1/models/{model['id']}")).status_code == 404
    assert (await api.delete(f"/api/v1/workspaces/{workspace['id']}")).status_code == 200


async def test_only_the_owner_or_an_admin_changes_a_model(
    api: httpx.AsyncClient, live_master: LiveMaster, ordinary: str  # noqa: F811
) -> None:
    admins = await new_model(api)
    async with httpx.AsyncClient(base_url=live_master.url, headers=bearer(ordinary)) as user:
        assert (await user.get(f"/api/v1/models/{admins['id']}")).status_code == 200
        for refused in (user.patch(f"/api/v1/models/{admins['id']}", json={"notes": "mine"}),
                        user.delete(f"/api/v1/models/{admins['id']}"),
                        user.post(f"/api/v1/models/{admins['id']}/archive"),
                        user.post(f"/api/v1/models/{admins['id']}/versions",
                                  json={"checkpointUuid": str(uuid.uuid4())})):
            answer = await refused
            assert answer.status_code == 403, answer.text
            assert "belongs to admin" in answer.json()["message"]
        own = await user.post("/api/v1/models", json={"name": unique("users")})
        assert own.status_code == 200 and own.json()["model"]["username"].startswith("user-")
        mine = own.json()["model"]["id"]
        assert (await user.patch(f"/api/v1/models/{mine}", json={"notes": "ok"})).status_code \
            == 200
    assert (await api.delete(f"/api/v1/models/{mine}")).status_code == 200  # an admin may
    assert (await api.delete(f"/api/v1/models/{admins['id']}")).status_code == 200


async def _wait_until_gone(path: Path) -> None:
    for _ in range(300):
        if not path.exists():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"checkpoint GC never removed {path}")


async def test_a_registered_checkpoint_survives_gc_and_keeps_its_experiment(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    experiment_id = (await create(api))["experiment"]["id"]
    first, second = await wait_for_trials(api, experiment_id, 2)
    registered, registered_dir = await report_checkpoint(api, live_master, first, 5)
    await report_checkpoint(api, live_master, first, 10)  # the latest: kept by the policy
    dropped, dropped_dir = await report_checkpoint(api, live_master, second, 5)
    await report_checkpoint(api, live_master, second, 10)

    model = await new_model(api)
    bad = await api.post(f"/api/v1/models/{model['name']}/versions",
                         json={"checkpointUuid": "not-a-uuid"})
    assert bad.status_code == 400 and bad.json()["details"][0].startswith("checkpointUuid:")
    unknown = await api.post(f"/api/v1/models/{model['name']}/versions",
                             json={"checkpointUuid": str(uuid.uuid4())})
    assert unknown.status_code == 404
    answer = await api.post(f"/api/v1/models/{model['name']}/versions",
                            json={"checkpointUuid": registered, "modelName": model["name"],
                                  "comment": "the good one", "labels": ["v1"]})
    assert answer.status_code == 200, answer.text
    version = answer.json()["modelVersion"]
    assert (version["version"], version["comment"], version["model"]["numVersions"]) == (
        1, "the good one", 1)
    checkpoint = version["checkpoint"]
    assert checkpoint["uuid"] == registered and checkpoint["state"] == "STATE_COMPLETED"
    assert checkpoint["metadata"]["steps_completed"] == 5
    assert checkpoint["training"]["trialId"] == first["id"]
    again = await api.post(f"/api/v1/models/{model['id']}/versions",
                           json={"checkpointUuid": registered})
    assert again.json()["modelVersion"]["version"] == 2

    listed = (await api.get(f"/api/v1/models/{model['name']}/versions",
                            params={"orderBy": "ORDER_BY_DESC", "limit": 1})).json()
    assert [v["version"] for v in listed["modelVersions"]] == [2]
    assert listed["pagination"]["total"] == 2 and listed["model"]["id"] == model["id"]
    patched = await api.patch(f"/api/v1/models/{model['name']}/versions/2",
                              json={"notes": "same checkpoint", "name": "twin"})
    assert patched.json()["modelVersion"]["notes"] == "same checkpoint"
    assert (await api.delete(f"/api/v1/models/{model['name']}/versions/2")).status_code == 200
    assert (await api.get(f"/api/v1/models/{model['name']}/versions/2")).status_code == 404
    metrics = await api.get(f"/api/v1/models/{model['name']}/versions/1/metrics")
    assert metrics.status_code == 501 and "batch-inference" in metrics.json()["message"]

    assert (await api.post(f"/api/v1/experiments/{experiment_id}/kill")).status_code == 200
    await _wait_until_gone(dropped_dir)  # GC ran: save_trial_latest 1, save_trial_best 1
    state = (await api.get(f"/api/v1/checkpoints/{dropped}")).json()["checkpoint"]["state"]
    assert state == "STATE_DELETED"
    kept = (await api.get(f"/api/v1/checkpoints/{registered}")).json()["checkpoint"]
    assert kept["state"] == "STATE_COMPLETED" and (registered_dir / "w.bin").exists()
    late = await api.post(f"/api/v1/models/{model['name']}/versions",
                          json={"checkpointUuid": dropped})
    assert late.status_code == 409 and "DELETED" in late.json()["message"]

    refused = await api.delete(f"/api/v1/experiments/{experiment_id}")
    assert refused.status_code == 409, refused.text
    assert f"{model['name']}:1" in refused.json()["message"]
    assert (registered_dir / "w.bin").exists()
    assert (await api.delete(f"/api/v1/models/{model['name']}")).status_code == 200
    assert (await api.delete(f"/api/v1/experiments/{experiment_id}")).status_code == 200
    assert not registered_dir.exists()


async def test_aliases_point_at_one_version_move_and_only_the_owner_sets_them(
    api: httpx.AsyncClient, live_master: LiveMaster, ordinary: str  # noqa: F811
) -> None:
    """MLflow's aliases, beside Determined's routes: unique within a model (setting one on
    another version moves it), bounded and validated, read by anyone, set by the owner."""
    experiment_id = (await create(api))["experiment"]["id"]
    trial = (await wait_for_trials(api, experiment_id, 2))[0]
    checkpoint, _ = await report_checkpoint(api, live_master, trial, 5)
    model = await new_model(api)
    base = f"/api/v1/models/{model['name']}"
    for _ in range(2):
        assert (await api.post(f"{base}/versions", json={"checkpointUuid": checkpoint})
                ).status_code == 200
    assert (await api.get(base)).json()["model"]["latestVersion"] == 2

    answer = await api.put(f"{base}/aliases/production", json={"version": 1})
    assert answer.status_code == 200, answer.text
    assert [(a["alias"], a["version"]) for a in answer.json()["aliases"]] == [("production", 1)]
    await api.put(f"{base}/aliases/champion", json={"version": 1})
    moved = await api.put(f"{base}/aliases/production", json={"version": 2})
    assert [(a["alias"], a["version"]) for a in moved.json()["aliases"]] == [
        ("champion", 1), ("production", 2)]
    by_alias = (await api.get(f"{base}/aliases/production")).json()["modelVersion"]
    assert (by_alias["version"], by_alias["checkpoint"]["uuid"]) == (2, checkpoint)

    for alias, problem in (("9lives", "a letter first"), ("a b", "a letter first"),
                           ("x" * 65, "at most 64"), ("latest", "reserved"), ("V3", "reserved")):
        bad = await api.put(f"{base}/aliases/{alias}", json={"version": 1})
        assert bad.status_code == 400 and bad.json()["details"][0].startswith("alias:"), bad.text
        assert problem in bad.json()["details"][0]
    missing = await api.put(f"{base}/aliases/staging", json={"version": 7})
    assert missing.status_code == 404 and missing.json()["details"][0].startswith("version:")
    for version in (0, 2**31, "two"):
        bad = await api.put(f"{base}/aliases/staging", json={"version": version})
        assert bad.status_code in (400, 422) and "version" in bad.text, bad.text
    assert (await api.get(f"{base}/aliases/staging")).status_code == 404
    for path in (f"{base}/versions/{2**40}", f"{base}/aliases/{'x' * 10_000}"):
        answer = await api.get(path)
        assert answer.status_code in (400, 404), answer.text

    async with httpx.AsyncClient(base_url=live_master.url, headers=bearer(ordinary)) as user:
        seen = await user.get(f"{base}/aliases")
        assert seen.status_code == 200 and len(seen.json()["aliases"]) == 2
        assert (await user.get(f"{base}/aliases/champion")).status_code == 200
        for refused in (user.put(f"{base}/aliases/champion", json={"version": 2}),
                        user.delete(f"{base}/aliases/champion"),
                        user.patch(f"{base}/versions/1", json={"notes": "mine"}),
                        user.delete(f"{base}/versions/1")):
            answer = await refused
            assert answer.status_code == 403, answer.text
            assert "belongs to admin" in answer.json()["message"]
    unchanged = (await api.get(f"{base}/aliases")).json()["aliases"]
    assert [(a["alias"], a["version"]) for a in unchanged] == [("champion", 1), ("production", 2)]

    assert (await api.delete(f"{base}/aliases/champion")).status_code == 200
    gone = await api.delete(f"{base}/aliases/champion")
    assert gone.status_code == 404 and gone.json()["details"][0].startswith("alias:")
    # Deleting a version takes its aliases with it.
    assert (await api.delete(f"{base}/versions/2")).status_code == 200
    assert (await api.get(f"{base}/aliases")).json()["aliases"] == []
    assert (await api.delete(base)).status_code == 200
    assert (await api.post(f"/api/v1/experiments/{experiment_id}/kill")).status_code == 200
