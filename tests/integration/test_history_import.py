"""Importing a Determined cluster's history (issue 39), the target's half: Determined 0.38.1's
JSON objects (as its REST API answers them, with fields Epochal never produces) posted to the
live master's import routes, then read back through Epochal's own routes; sent twice, nothing
new; refusals; an imported experiment behaving as any finished one."""

from __future__ import annotations

import base64
import copy
import io
import json
import tarfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from api.auth import open_session
from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")

CONFIG = json.loads((Path(__file__).parents[1] / "fixtures" /
                     "determined_experiment_config.json").read_text())
T0 = "2024-11-01T10:00:00.123456Z"
T1 = "2024-11-01T11:00:00Z"


def tgz(files: dict[str, bytes]) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return base64.b64encode(buffer.getvalue()).decode()


@dataclass
class Source:
    """One source cluster's objects, as Determined answered them."""

    id: int
    uid: str
    username: str
    user: dict[str, Any]
    workspace: dict[str, Any]
    project: dict[str, Any]
    experiment: dict[str, Any]
    trials: list[dict[str, Any]]
    checkpoint: dict[str, Any]
    model: dict[str, Any]
    version: dict[str, Any]
    storage: Path

    def experiment_item(self, **changes: Any) -> dict[str, Any]:
        config = copy.deepcopy(CONFIG)
        config["checkpoint_storage"]["host_path"] = str(self.storage)
        config["searcher"] = {"name": "random", "max_trials": 2, "metric": "validation_loss",
                              "smaller_is_better": True, "max_length": {"batches": 100},
                              "max_concurrent_trials": 0, "source_checkpoint_uuid": None,
                              "source_trial_id": None}
        config["hyperparameters"]["learning_rate"] = {"type": "double", "minval": 0.1,
                                                      "maxval": 1.0}
        experiment = {**self.experiment, "config": config, **changes}
        return {"experiment": experiment, "config": config,
                "modelDefinition": tgz({"train.py": b"print('trained at the source')\n"})}


def objects(uid: str, storage: Path) -> dict[str, Any]:
    username = f"ada-{uid}"
    user = {"id": 5, "username": username, "displayName": "Ada L.", "admin": False,
            "active": True, "modifiedAt": "2024-10-01T09:00:00Z", "agentUserGroup": None,
            "remote": False, "lastAuthAt": "2024-10-02T09:00:00.5Z"}
    workspace = {"id": 3, "name": f"vision-{uid}", "archived": False, "username": username,
                 "immutable": False, "numProjects": 1, "pinned": False, "userId": 5,
                 "numExperiments": 1, "state": "WORKSPACE_STATE_UNSPECIFIED",
                 "errorMessage": "", "agentUserGroup": None, "checkpointStorageConfig": None,
                 "defaultComputePool": "", "defaultAuxPool": "", "autoCreated": False}
    project = {"id": 7, "name": "mnist", "workspaceId": 3, "description": "digits",
               "lastExperimentStartedAt": T0,
               "notes": [{"name": "Readme", "contents": "# what we tried"}],
               "numExperiments": 1, "numActiveExperiments": 0, "archived": False,
               "username": username, "immutable": False, "userId": 5,
               "workspaceName": workspace["name"], "state": "WORKSPACE_STATE_UNSPECIFIED",
               "errorMessage": "", "key": f"M{uid.upper()}"}
    experiment = {
        "id": 41, "description": "mnist at the source", "labels": ["vision", "baseline"],
        "startTime": T0, "endTime": T1, "state": "STATE_COMPLETED", "archived": False,
        "numTrials": 2, "trialIds": [101, 102], "displayName": "Ada L.", "userId": 5,
        "username": username, "resourcePool": "default", "searcherType": "random",
        "searcherMetric": "validation_loss", "name": "mnist_pytorch_const",
        "notes": "kept at the source", "jobId": str(uuid.uuid4()), "forkedFrom": None,
        "progress": 1, "projectId": 7, "projectName": "mnist", "workspaceId": 3,
        "workspaceName": workspace["name"], "parentArchived": False,
        "originalConfig": "name: mnist_pytorch_const\nentrypoint: python3 train.py\n",
        "projectOwnerId": 5, "checkpointSize": "168", "checkpointCount": 1,
        "bestTrialSearcherMetric": 0.25, "bestTrialId": 102, "unmanaged": False,
        "duration": 3599877, "externalExperimentId": None, "externalTrialId": None,
        "modelDefinitionSize": 120, "pachydermIntegration": None}
    trials = [{"id": tid, "experimentId": 41, "startTime": T0, "endTime": T1,
               "state": "STATE_COMPLETED", "restarts": restarts,
               "hparams": {"learning_rate": lr, "dropout1": 0.25, "n_filters1": 32},
               "totalBatchesProcessed": 100, "bestValidation": None, "latestValidation": None,
               "bestCheckpoint": None, "runnerState": "validating", "wallClockTime": 3599.9,
               "warmStartCheckpointUuid": "", "taskId": f"41.{uuid.uuid4()}",
               "totalCheckpointSize": "168", "searcherMetricValue": metric,
               "taskIds": [], "logRetentionDays": 30, "metadata": {}, "summaryMetrics": {}}
              for tid, restarts, lr, metric in ((101, 1, 0.5, 0.3), (102, 0, 0.2, 0.25))]
    checkpoint_uuid = str(uuid.uuid4())
    checkpoint = {
        "taskId": trials[1]["taskId"], "allocationId": trials[1]["taskId"] + ".1",
        "uuid": checkpoint_uuid, "reportTime": "2024-11-01T10:59:00Z",
        "resources": {"model.pt": "123", "metadata.json": "45"},
        "metadata": {"steps_completed": 100, "framework": "torch-2.3.1",
                     "determined_version": "0.38.1", "format": "pickle"},
        "state": "STATE_COMPLETED",
        "training": {"trialId": 102, "experimentId": 41, "experimentConfig": CONFIG,
                     "hparams": trials[1]["hparams"],
                     "trainingMetrics": {"avgMetrics": {"loss": 0.5}},
                     "validationMetrics": {"avgMetrics": {"validation_loss": 0.25}},
                     "searcherMetric": 0.25},
        "storageId": 1}
    model = {"name": f"digits-{uid}", "description": "the source's model",
             "metadata": {"team": "vision"}, "creationTime": "2024-11-02T08:00:00Z",
             "lastUpdatedTime": "2024-11-03T08:00:00Z", "id": 9, "numVersions": 1,
             "labels": ["prod"], "username": username, "userId": 5, "archived": False,
             "notes": "model notes", "workspaceId": 3}
    version = {"model": model, "checkpoint": checkpoint, "version": 1,
               "creationTime": "2024-11-02T09:00:00Z", "id": 12, "name": "first",
               "metadata": {"accuracy": 0.97}, "lastUpdatedTime": "2024-11-02T09:00:00Z",
               "labels": ["best"], "username": username, "userId": 5,
               "comment": "from trial 102", "notes": ""}
    (storage / "determined-checkpoint" / checkpoint_uuid).mkdir(parents=True)
    (storage / "determined-checkpoint" / checkpoint_uuid / "model.pt").write_bytes(b"weights")
    return {"username": username, "user": user, "workspace": workspace, "project": project,
            "experiment": experiment, "trials": trials, "checkpoint": checkpoint,
            "model": model, "version": version}


def report(trial_id: int, group: str, steps: int, values: dict[str, Any], **extra: Any
           ) -> dict[str, Any]:
    """A v1MetricsReport as Determined's trial_metrics stream sends it (a validation's values
    under `validation_metrics`, any other group's under `avg_metrics`)."""
    metrics: dict[str, Any] = {
        "validation_metrics" if group == "validation" else "avg_metrics": values}
    if group == "training":
        metrics["batch_metrics"] = [values, values]
    return {"id": steps, "trialId": trial_id, "endTime": f"2024-11-01T10:{steps // 2:02d}:00Z",
            "metrics": metrics, "totalBatches": steps, "trialRunId": 1, "archived": False,
            "group": group, "runId": trial_id, "partialMetrics": None, **extra}


async def post_items(api: httpx.AsyncClient, source_id: int, kind: str,
                     items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answer = await api.post(f"/api/v1/imports/{source_id}/{kind}", json={"items": items})
    assert answer.status_code == 200, answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


async def import_all(api: httpx.AsyncClient, source: Source, *, restart_logs: bool = True
                     ) -> dict[str, list[dict[str, Any]]]:
    """Every kind, in the importer's order; the results of each."""
    out = {}
    for kind, items in (("users", [source.user]), ("workspaces", [source.workspace]),
                        ("projects", [source.project]),
                        ("experiments", [source.experiment_item()]),
                        ("trials", source.trials), ("checkpoints", [source.checkpoint]),
                        ("models", [source.model]), ("model-versions", [source.version])):
        out[kind] = await post_items(api, source.id, kind, items)
    trial_101, trial_102 = (t["id"] for t in source.trials)
    for trial, losses in ((trial_101, (0.4, 0.3)), (trial_102, (0.35, 0.25))):
        training = [report(trial, "training", 50, {"loss": 0.9}),
                    report(trial, "training", 100, {"loss": 0.5})]
        validation = [report(trial, "validation", 50, {"validation_loss": losses[0]}),
                      report(trial, "validation", 100, {"validation_loss": losses[1],
                                                        "accuracy": "NaN"}),
                      report(trial, "validation", 75, {"validation_loss": 0.01},
                             archived=True)]
        for group, reports in (("training", training), ("validation", validation)):
            written = await api.post(f"/api/v1/imports/{source.id}/trials/{trial}/metrics",
                                     json={"group": group, "reports": reports})
            assert written.status_code == 200, written.text
            out.setdefault(f"metrics-{trial}", []).append(written.json())
    logs = [{"id": str(1000 + i), "trialId": trial_101, "timestamp": f"2024-11-01T10:0{i}:00Z",
             "message": f"line {i}\n", "log": f"line {i}\n", "level": "LOG_LEVEL_INFO",
             "agentId": "det-agent-1", "containerId": "c0ffee", "rankId": 0, "source": "",
             "stdtype": "stdout"} for i in range(3)]
    written = await api.post(f"/api/v1/imports/{source.id}/trials/{trial_101}/logs",
                             json={"restart": restart_logs, "logs": logs})
    assert written.status_code == 200, written.text
    out["logs"] = [written.json()]
    done = await api.post(f"/api/v1/imports/{source.id}/done", json={
        "kind": "experiment", "externalIds": ["41"], "sourceStates": ["STATE_COMPLETED"]})
    assert done.status_code == 200 and done.json() == {"marked": 1}, done.text
    return out


@pytest_asyncio.fixture(loop_scope="session")
async def source(api: httpx.AsyncClient, tmp_path: Path) -> AsyncIterator[Source]:
    uid = uuid.uuid4().hex[:8]
    made = await api.post("/api/v1/imports", json={
        "kind": "determined", "url": "https://det.example.com:8080", "clusterId": uid,
        "clusterName": "lab", "version": "0.38.1"})
    assert made.status_code == 200 and made.json()["created"] is True, made.text
    again = await api.post("/api/v1/imports", json={
        "kind": "determined", "url": "https://det.example.com", "clusterId": uid,
        "clusterName": "lab", "version": "0.38.1"})
    assert again.json() == {"sourceId": made.json()["sourceId"], "created": False}
    yield Source(id=made.json()["sourceId"], uid=uid, storage=tmp_path,
                 **objects(uid, tmp_path))


async def test_an_imported_history_reads_back_through_epochal_routes(
    api: httpx.AsyncClient, source: Source, live_master: LiveMaster,
) -> None:
    results = await import_all(api, source)
    for kind in ("users", "workspaces", "projects", "experiments", "trials", "checkpoints",
                 "models", "model-versions"):
        assert all(r["created"] and r["skipped"] is None and r["localId"]
                   for r in results[kind]), (kind, results[kind])
    assert results["experiments"][0]["warnings"] == []  # its storage is inside the roots
    experiment_id = int(results["experiments"][0]["localId"])
    trial_101, trial_102 = (int(r["localId"]) for r in results["trials"])

    user = (await api.get(f"/api/v1/users/{results['users'][0]['localId']}")).json()["user"]
    assert (user["username"], user["displayName"], user["admin"]) == (
        source.username, "Ada L.", False)
    login = await api.post("/api/v1/auth/login", json={"username": source.username,
                                                       "password": "anything-at-all"})
    assert login.status_code == 401  # no password until one is set
    project = (await api.get(f"/api/v1/projects/{results['projects'][0]['localId']}")).json()[
        "project"]
    assert project["notes"] == [{"name": "Readme", "contents": "# what we tried"}]
    assert (project["key"], project["username"], project["workspaceName"]) == (
        source.project["key"], source.username, source.workspace["name"])

    answer = (await api.get(f"/api/v1/experiments/{experiment_id}")).json()
    experiment = answer["experiment"]
    assert experiment["importedFrom"] == {"kind": "determined",
                                          "url": "https://det.example.com",
                                          "experimentId": "41"}
    assert experiment["workflowId"] is None
    assert (experiment["name"], experiment["state"], experiment["notes"],
            experiment["labels"], experiment["username"], experiment["description"]) == (
        "mnist_pytorch_const", "STATE_COMPLETED", "kept at the source", ["baseline", "vision"],
        source.username, "mnist at the source")
    assert experiment["startTime"].startswith("2024-11-01T10:00:00.123")
    assert experiment["endTime"].startswith("2024-11-01T11:00:00")
    assert experiment["projectId"] == int(results["projects"][0]["localId"])
    assert experiment["originalConfig"].startswith("name: mnist_pytorch_const")
    assert answer["config"]["searcher"]["name"] == "random"
    assert answer["config"]["log_policies"] == CONFIG["log_policies"]  # Determined's, kept
    # Derived columns, computed as for the cluster's own reports.
    assert (experiment["bestTrialId"], experiment["bestValidation"]) == (trial_102, 0.25)
    assert experiment["numTrials"] == 2 and experiment["progress"] == 1.0
    model_def = (await api.get(f"/api/v1/experiments/{experiment_id}/model_def")).json()
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(model_def["b64Tgz"]))) as archive:
        assert archive.getnames() == ["train.py"]

    trials = (await api.get(f"/api/v1/experiments/{experiment_id}/trials")).json()["trials"]
    first = trials[0]
    assert (first["id"], first["state"], first["restarts"], first["totalBatchesProcessed"],
            first["hparams"]["learning_rate"], first["searcherMetricValue"],
            first["workflowId"]) == (trial_101, "STATE_COMPLETED", 1, 100, 0.5, 0.3, None)
    assert first["bestValidation"]["metrics"]["avgMetrics"] == {"validation_loss": 0.3,
                                                                "accuracy": None}
    assert first["runId"] == 2  # one restart: at least two runs (or its reports' run ids)

    metrics = (await api.get(f"/api/v1/trials/{trial_101}/metrics",
                             params={"group": "validation"})).json()["metrics"]
    assert [(r["stepsCompleted"], r["trialRunId"], r["reportTime"][:19], r["metrics"])
            for r in metrics] == [
        (50, 1, "2024-11-01T10:25:00", {"validation_loss": 0.4}),
        (100, 1, "2024-11-01T10:50:00", {"validation_loss": 0.3, "accuracy": None})]
    series = (await api.get("/api/v1/trials/time-series", params={
        "trialIds": [trial_102], "metricNames": ["loss"], "group": "training"})).json()
    [data] = [s["data"] for s in series["trials"][0]["metrics"]]
    assert [(p["batches"], p["values"]) for p in data] == [(50, {"loss": 0.9}),
                                                           (100, {"loss": 0.5})]
    workloads = await api.get(f"/api/v1/trials/{trial_102}/workloads")
    assert workloads.status_code == 200, workloads.text
    assert len(workloads.json()["workloads"]) == 5  # 2 trainings, 2 validations, 1 checkpoint
    summary = (await api.get(f"/api/v1/trials/{trial_102}")).json()["trial"]["summaryMetrics"]
    assert summary["validation_metrics"]["validation_loss"]["min"] == 0.25

    checkpoints = (await api.get(f"/api/v1/experiments/{experiment_id}/checkpoints")).json()
    [checkpoint] = checkpoints["checkpoints"]
    assert (checkpoint["uuid"], checkpoint["state"], checkpoint["resources"],
            checkpoint["metadata"]["framework"]) == (
        source.checkpoint["uuid"], "STATE_COMPLETED", {"model.pt": 123, "metadata.json": 45},
        "torch-2.3.1")
    download = await api.get(f"/api/v1/checkpoints/{checkpoint['uuid']}/download")
    assert download.status_code == 200, download.text
    with tarfile.open(fileobj=io.BytesIO(download.content)) as archive:
        assert archive.extractfile("model.pt").read() == b"weights"  # type: ignore[union-attr]

    versions = (await api.get(f"/api/v1/models/{source.model['name']}/versions")).json()
    assert (versions["model"]["description"], versions["model"]["metadata"],
            versions["model"]["labels"], versions["model"]["username"]) == (
        "the source's model", {"team": "vision"}, ["prod"], source.username)
    assert versions["model"]["creationTime"].startswith("2024-11-02T08:00:00")
    [version] = versions["modelVersions"]
    assert (version["version"], version["name"], version["comment"],
            version["checkpoint"]["uuid"]) == (1, "first", "from trial 102",
                                               source.checkpoint["uuid"])

    logs = await api.get(f"/api/v1/trials/{trial_101}/logs", params={"follow": "false"})
    lines = [json.loads(line)["result"] for line in logs.text.splitlines()]
    assert [(line["log"], line["level"], line["agentId"]) for line in lines] == [
        (f"line {i}\n", "LOG_LEVEL_INFO", "det-agent-1") for i in range(3)]

    # The same objects again: the same ids, nothing new.
    counts = await live_master.pool.fetchrow(
        "SELECT (SELECT count(*) FROM experiments) AS e, (SELECT count(*) FROM metrics) AS m,"
        " (SELECT count(*) FROM task_logs) AS l, (SELECT count(*) FROM users) AS u")
    again = await import_all(api, source, restart_logs=False)
    for kind in ("users", "workspaces", "projects", "experiments", "trials", "checkpoints",
                 "models", "model-versions"):
        assert [(r["localId"], r["created"]) for r in again[kind]] == [
            (r["localId"], False) for r in results[kind]], kind
    assert again[f"metrics-{source.trials[0]['id']}"] == [{"written": 0, "warnings": []}] * 2
    assert again["logs"] == [{"written": 0}]
    assert counts == await live_master.pool.fetchrow(
        "SELECT (SELECT count(*) FROM experiments) AS e, (SELECT count(*) FROM metrics) AS m,"
        " (SELECT count(*) FROM task_logs) AS l, (SELECT count(*) FROM users) AS u")
    held = (await api.get(f"/api/v1/imports/{source.id}/objects",
                          params={"kind": "trials"})).json()
    assert held == {"total": 2, "objects": [
        {"externalId": "101", "localId": str(trial_101), "done": False, "sourceState": None},
        {"externalId": "102", "localId": str(trial_102), "done": False, "sourceState": None}]}
    marked = (await api.get(f"/api/v1/imports/{source.id}/objects",
                            params={"kind": "experiment"})).json()["objects"]
    assert (marked[0]["done"], marked[0]["sourceState"]) == (True, "STATE_COMPLETED")

    [fork] = await post_items(api, source.id, "experiments", [
        source.experiment_item(id=42, forkedFrom=41, state="STATE_CANCELED", archived=True)])
    forked = (await api.get(f"/api/v1/experiments/{fork['localId']}")).json()["experiment"]
    assert (forked["forkedFrom"], forked["state"], forked["archived"]) == (
        experiment_id, "STATE_CANCELED", True)

    await finished_experiment_behaviour(api, experiment_id, trial_101)


async def finished_experiment_behaviour(api: httpx.AsyncClient, experiment_id: int,
                                        trial_id: int) -> None:
    """What a finished experiment refuses, with the same messages; what it allows."""
    for action in ("pause", "activate", "kill", "cancel"):
        answer = await api.post(f"/api/v1/experiments/{experiment_id}/{action}")
        assert answer.status_code == 409, (action, answer.text)
        assert "COMPLETED: it can no longer" in answer.json()["message"]
    killed = await api.post(f"/api/v1/trials/{trial_id}/kill")
    assert killed.status_code == 409 and "can no longer be killed" in killed.json()["message"]
    noted = await api.patch(f"/api/v1/experiments/{experiment_id}",
                            json={"notes": "noted here", "labels": ["here"]})
    assert noted.status_code == 200, noted.text
    assert noted.json()["experiment"]["labels"] == ["here"]
    for action in ("archive", "unarchive"):
        answer = await api.post(f"/api/v1/experiments/{experiment_id}/{action}")
        assert answer.status_code == 200, (action, answer.text)
    moved = await api.post(f"/api/v1/experiments/{experiment_id}/move",
                           json={"destinationProjectId": 1})
    assert moved.status_code == 200, moved.text
    gc = await api.patch(f"/api/v1/experiments/{experiment_id}", json={
        "checkpointStorage": {"saveExperimentBest": 1, "saveTrialBest": 1,
                              "saveTrialLatest": 1}})
    assert gc.status_code == 200, gc.text
    retained = await api.put(f"/api/v1/experiments/{experiment_id}/retain_logs",
                             json={"numDays": 5})
    assert retained.status_code == 200, retained.text
    importance = await api.get(f"/api/v1/experiments/{experiment_id}/hyperparameter-importance")
    assert importance.status_code < 500, importance.text
    # Its checkpoint is a model version: refused as for any experiment.
    deleted = await api.delete(f"/api/v1/experiments/{experiment_id}")
    assert deleted.status_code == 409 and "model" in deleted.json()["message"]


async def test_refusals_name_what_is_wrong(
    api: httpx.AsyncClient, source: Source, live_master: LiveMaster,
) -> None:
    missing = await api.post(f"/api/v1/imports/{source.id}/experiments",
                             json={"items": [source.experiment_item(projectId=77)]})
    assert missing.status_code == 400
    assert "items[0].experiment.projectId: project 77" in missing.json()["details"][0]
    bad = await api.post(f"/api/v1/imports/{source.id}/users", json={"items": [
        source.user, {**source.user, "id": 6, "modifiedAt": "yesterday"}]})
    assert bad.status_code == 400
    assert bad.json()["details"][0].startswith("items[1].modifiedAt:")
    assert not await live_master.pool.fetchval(  # the request's first item is not kept either
        "SELECT EXISTS (SELECT 1 FROM users WHERE username = $1)", source.username)
    unknown = await api.post(f"/api/v1/imports/{source.id}/webhooks", json={"items": []})
    assert unknown.status_code == 400 and unknown.json()["details"][0].startswith("kind:")
    gone = await api.post("/api/v1/imports/99999999/users", json={"items": [source.user]})
    assert gone.status_code == 404
    huge = await api.post(f"/api/v1/imports/{source.id}/trials",
                          content=b'{"items": ["' + b"x" * (65 * 1024 * 1024) + b'"]}',
                          headers={"content-type": "application/json"})
    assert huge.status_code == 413 and "at most 64 MiB" in huge.json()["message"]

    name = f"someone-{source.uid}"
    made = await api.post("/api/v1/users", json={"user": {"username": name},
                                                 "password": "a-long-password"})
    token = await open_session(live_master.pool, made.json()["user"]["id"],
                               timedelta(minutes=5))
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30, headers={
            "Authorization": f"Bearer {token}"}) as user:
        for answer in (await user.post("/api/v1/imports", json={
                           "url": "x", "clusterId": "y"}),
                       await user.get(f"/api/v1/imports/{source.id}/objects",
                                      params={"kind": "users"}),
                       await user.post(f"/api/v1/imports/{source.id}/users",
                                       json={"items": [source.user]})):
            assert answer.status_code == 403, answer.text


async def test_what_cannot_be_imported_is_skipped_with_the_reason(
    api: httpx.AsyncClient, source: Source,
) -> None:
    [existing] = await post_items(api, source.id, "users", [
        {**source.user, "id": 77, "username": "admin"}])
    assert (existing["localId"], existing["created"]) == ("1", False)
    assert "already exists" in existing["warnings"][0]
    await post_items(api, source.id, "workspaces", [source.workspace])
    await post_items(api, source.id, "projects", [source.project])
    running, orphan, refused, outside, s3 = await post_items(api, source.id, "experiments", [
        source.experiment_item(id=50, state="STATE_ACTIVE"),
        source.experiment_item(id=51, username="nobody-here"),
        {**source.experiment_item(id=52, username="admin"),
         "config": {**CONFIG, "searcher": {"name": "nope"}}},
        {**source.experiment_item(id=53, username="admin"),
         "config": {**CONFIG, "checkpoint_storage": {"type": "shared_fs",
                                                     "host_path": "/opt/det-checkpoints"}}},
        {**source.experiment_item(id=54, username="admin"),
         "config": {**CONFIG, "checkpoint_storage": {"type": "s3", "bucket": "det-ckpts",
                                                     "save_trial_best": 1}}},
    ])
    assert "STATE_ACTIVE" in running["skipped"] and running["localId"] is None
    assert "'nobody-here' was not imported" in orphan["skipped"]
    assert refused["skipped"].startswith("invalid experiment config") and (
        "searcher" in refused["skipped"])
    assert outside["created"] and "/opt/det-checkpoints is outside" in outside["warnings"][0]
    assert s3["created"] and "det-ckpts" in s3["warnings"][0] and (
        "credentials" in s3["warnings"][0])
    template = {"name": f"tpl-{source.uid}", "config": {"description": "a"}, "workspaceId": 1}
    assert (await post_items(api, source.id, "templates", [template]))[0]["created"]
    [clash] = await post_items(api, source.id, "templates", [{**template, "config": {}}])
    assert "another config" in clash["skipped"]

    # A checkpoint outside the cluster's roots: imported, its files refused as for any such.
    [trial] = await post_items(api, source.id, "trials", [{**source.trials[0], "id": 530,
                                                           "experimentId": 53}])
    checkpoint = {**source.checkpoint, "uuid": str(uuid.uuid4()),
                  "training": {"trialId": 530, "experimentId": 53}}
    assert (await post_items(api, source.id, "checkpoints", [checkpoint]))[0]["created"]
    download = await api.get(f"/api/v1/checkpoints/{checkpoint['uuid']}/download")
    assert download.status_code == 409 and "outside" in download.json()["message"]
    assert trial["created"]
    [stuck] = await post_items(api, source.id, "trials", [{
        **source.trials[0], "id": 531, "experimentId": 53, "state": "STATE_RUNNING",
        "totalBatchesProcessed": 50}])
    assert "imported as CANCELED" in stuck["warnings"][0]
    shown = (await api.get(f"/api/v1/trials/{stuck['localId']}")).json()["trial"]
    assert (shown["state"], shown["progress"]) == ("STATE_CANCELED", 0.5)  # of 100 batches
    # Deleted as any finished experiment; files outside the roots are never touched.
    deleted = await api.delete(f"/api/v1/experiments/{outside['localId']}")
    assert deleted.status_code == 200, deleted.text
    gone = await api.get(f"/api/v1/experiments/{outside['localId']}")
    assert gone.status_code == 404
