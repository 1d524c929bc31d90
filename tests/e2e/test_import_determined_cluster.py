"""End to end: `epochal import determined` copies a cluster's history into another one.

The SOURCE is a real Epochal cluster speaking Determined's API, filled by Determined 0.38.1's
own client (its SDK and bindings, one script in the Determined venv): a second user, a workspace
and project, a template, Core API experiments (one the second user's, with notes and labels;
one of two trials printing many log lines; a fork; one archived; one paused, which stays
behind), a model with two versions (labels, notes, metadata). The TARGET is another cluster, on
a Temporal of its own. The import is killed after its first experiment is done, run again to the
end, and once more (nothing new); then every object is compared field by field through both
APIs (ids mapped), an imported checkpoint is downloaded and an imported experiment forked and
run on the target.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.cluster import EPOCHAL, REPO, Cluster, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

TERMINAL = {"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR"}
LOUD_LINES = 30_000

TRAIN = """
import sys
import determined as det

with det.core.init() as core:
    hp = det.get_cluster_info().trial.hparams
    for line in range(int(hp["lines"])):
        print(f"line {line} of a loud trial")
    for step in (10, 20, 30):
        core.train.report_training_metrics(steps_completed=step,
                                           metrics={"loss": hp["lr"] / step})
    core.train.report_metrics("inference", steps_completed=30, metrics={"latency": 0.5})
    core.train.report_validation_metrics(steps_completed=30,
                                         metrics={"validation_loss": hp["lr"] / 30})
    with core.checkpoint.store_path({"steps_completed": 30}) as (path, uuid):
        (path / "weights.txt").write_text(f"weights of {uuid}")
"""

# Runs in Determined's venv: fills the source through Determined's client; prints what it made.
FILL = """
import json, pathlib, sys
from determined.common.api import bindings
from determined.common import context
from determined.experimental import client

master, password, model_dir = sys.argv[1:4]
admin = client.Determined(master, "admin", password)
session = admin._session
bob_user = admin.create_user("bob", admin=False, password="Bob-pass-1234")
bob_user.change_display_name("Bob Builder")
workspace = admin.create_workspace("imported-ws")
project = workspace.create_project("imported-proj", description="history to keep")
bindings.post_PostTemplate(session, template_name="imp-tpl", body=bindings.v1Template(
    name="imp-tpl", config={"description": "from a template", "max_restarts": 0},
    workspaceId=workspace.id))

def config(name, lines=0, lr=0.5, grid=False):
    hps = {"lr": {"type": "categorical", "vals": [0.5, 0.25]} if grid else lr, "lines": lines}
    return {"name": name, "entrypoint": "python3 train.py", "max_restarts": 0,
            "hyperparameters": hps,
            "searcher": {"name": "grid" if grid else "single", "metric": "validation_loss",
                         "max_length": {"batches": 30}}}

bob = client.Determined(master, "bob", "Bob-pass-1234")
first = bob.create_experiment(config("bob-first"), model_dir, project_id=project.id)
second = admin.create_experiment(config("admin-grid", lines=%(lines)d, grid=True), model_dir,
                                 template="imp-tpl")
assert first.wait(interval=0.5).name == "COMPLETED"
first.set_notes("notes of the first")
first.set_labels({"keep"})  # (add_label's PUT /experiments/{id}/labels: not served)
fork = bindings.post_CreateExperiment(session, body=bindings.v1CreateExperimentRequest(
    config=json.dumps(config("forked", lr=0.125)), parentId=first.id, activate=True))
paused = bindings.post_CreateExperiment(session, body=bindings.v1CreateExperimentRequest(
    config=json.dumps(config("paused")), activate=False,
    modelDefinition=context.read_v1_context(pathlib.Path(model_dir))))
assert second.wait(interval=0.5).name == "COMPLETED"
forked = admin.get_experiment(fork.experiment.id)
assert forked.wait(interval=0.5).name == "COMPLETED"
forked.archive()
model = admin.create_model("imp-model", description="a model", metadata={"team": "a"},
                           labels=["prod"], workspace_name="imported-ws")
bindings.patch_PatchModel(session, modelName="imp-model",
                          body=bindings.v1PatchModel(notes="model notes"))
versions = []
for experiment in (first, second):
    checkpoint = experiment.list_checkpoints()[0]
    version = model.register_version(checkpoint.uuid)
    version.set_notes(f"version notes {version.model_version}")
    bindings.patch_PatchModelVersion(
        session, modelName="imp-model", modelVersionNum=version.model_version,
        body=bindings.v1PatchModelVersion(comment="a comment", labels=["best"],
                                          name=f"v-{experiment.id}"))
    versions.append(version.model_version)
print(json.dumps({"experiments": [first.id, second.id, forked.id, paused.experiment.id],
                  "versions": versions}))
"""


@dataclass
class Clusters:
    source: Cluster
    target: Cluster
    det_venv: Path
    made: dict[str, Any]
    work: Path

    def importer(self, *args: str) -> list[str]:
        return [*EPOCHAL, "-m", self.target.url, "import", "determined", "--master",
                self.source.url, "-u", "admin", *args]

    @property
    def import_env(self) -> dict[str, str]:
        return {**self.target.env, "DET_PASS": self.source.secrets["admin_password"]}

    def run_import(self, *args: str) -> dict[str, Any]:
        done = subprocess.run(self.importer("--json", *args), env=self.import_env, cwd=REPO,
                              capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        assert "Traceback" not in done.stderr, done.stderr
        return dict(json.loads(done.stdout))


@pytest.fixture(scope="module")
def clusters(postgres_url: str, temporal_address: str, det_venv: Path,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    work = tmp_path_factory.mktemp("history-import")
    model_dir = work / "model"
    model_dir.mkdir()
    (model_dir / "train.py").write_text(TRAIN)
    task_env = ("--runtime", "process", "--task-env", str(det_venv.parent))
    with shared_servers_cluster(postgres_url, temporal_address, "imp-src", "--slots", "2",
                                *task_env) as source, \
            shared_servers_cluster(postgres_url, None, "imp-dst", "--slots", "1",
                                   *task_env) as target:
        home = work / "det-home"
        home.mkdir()
        fill = subprocess.run(
            [str(det_venv / "python"), "-c", FILL % {"lines": LOUD_LINES}, source.url,
             source.secrets["admin_password"], str(model_dir)],
            env={"HOME": str(home), "PATH": os.environ["PATH"]}, capture_output=True,
            text=True, timeout=420, stdin=subprocess.DEVNULL)
        assert fill.returncode == 0, fill.stderr[-4000:]
        made = json.loads(fill.stdout.strip().splitlines()[-1])
        [loud] = [t for t in source.trials(made["experiments"][1]) if t["hparams"]["lr"] == 0.5]
        wait_for(lambda: len(source.trial_logs(loud["id"])) >= LOUD_LINES, 120,
                 "the loud trial's lines to reach the source")
        yield Clusters(source, target, det_venv, made, work)


def objects(target: Cluster, kind: str) -> dict[str, dict[str, Any]]:
    """What the target holds from its (first) source: external id -> object."""
    answer = target.get("/imports/1/objects", kind=kind, limit=10_000)
    return {o["externalId"]: o for o in answer["objects"]}


@pytest.fixture(scope="module")
def imported(clusters: Clusters) -> dict[str, Any]:
    """The import killed once its first experiment is done, then run to the end, then once
    more: the summaries of the last two runs."""
    first, second, forked, paused = clusters.made["experiments"]
    proc = subprocess.Popen(clusters.importer("--logs", "--parallel", "1"),
                            env=clusters.import_env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        def first_done() -> bool:
            try:
                done = objects(clusters.target, "experiment")
            except httpx.HTTPStatusError:
                return False
            return bool(done.get(str(first), {}).get("done"))

        wait_for(first_done, 120, "the first experiment to be imported", interval=0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    done = {k for k, o in objects(clusters.target, "experiment").items() if o["done"]}
    assert str(second) not in done and str(forked) not in done, "killed too late"

    full = clusters.run_import("--logs")
    again = clusters.run_import("--logs")
    return {"full": full, "again": again}


def test_a_rerun_after_a_kill_completes_and_a_third_adds_nothing(
    clusters: Clusters, imported: dict[str, Any]
) -> None:
    first, second, forked, paused = clusters.made["experiments"]
    full, again = imported["full"], imported["again"]
    kinds = full["kinds"]
    # The fork is new; the second was new, or sent by the killed run but not done.
    assert kinds["experiments"]["created"] in (1, 2), full
    assert kinds["experiments"]["created"] + kinds["experiments"]["alreadyThere"] == 3
    assert kinds["experiments"]["skipped"] == 1
    assert [line for line in full["skipped"] if f"experiment {paused} " in line
            and "PAUSED on the source: finish or kill it" in line]
    assert not any(k["failed"] for k in kinds.values()), full
    assert all(k["created"] == 0 for k in again["kinds"].values()), again
    assert again["kinds"]["experiments"]["alreadyThere"] == 3
    done = objects(clusters.target, "experiment")
    assert {k for k, o in done.items() if o["done"]} == {str(first), str(second), str(forked)}
    assert not full["warnings"], full["warnings"]  # the source's storage is reachable here


def _mapped(target: Cluster, kind: str) -> dict[int, int]:
    return {int(k): int(o["localId"]) for k, o in objects(target, kind).items()}


def _without(item: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in keys}


def test_every_object_is_the_same_on_both_sides(
    clusters: Clusters, imported: dict[str, Any]
) -> None:
    source, target = clusters.source, clusters.target
    first, second, forked, paused = clusters.made["experiments"]

    def users(cluster: Cluster) -> dict[str, Any]:
        return {u["username"]: (u["displayName"], u["admin"], u["active"])
                for u in cluster.get("/users", limit=1000)["users"]}
    assert users(target)["bob"] == users(source)["bob"] == ("Bob Builder", False, True)

    workspaces = _mapped(target, "workspaces")
    projects = _mapped(target, "projects")
    source_ws = {w["name"]: w for w in source.get("/workspaces")["workspaces"]}["imported-ws"]
    target_ws = target.get(f"/workspaces/{workspaces[source_ws['id']]}")["workspace"]
    same: tuple[str, ...] = ("name", "archived", "username", "immutable")
    assert {k: target_ws[k] for k in same} == {k: source_ws[k] for k in same}
    [source_project] = source.get(f"/workspaces/{source_ws['id']}/projects")["projects"]
    target_project = target.get(f"/projects/{projects[source_project['id']]}")["project"]
    same = ("name", "description", "notes", "archived", "username")
    assert {k: target_project[k] for k in same} == {k: source_project[k] for k in same}
    assert target_project["workspaceId"] == target_ws["id"]

    source_tpl = source.get("/templates/imp-tpl")["template"]
    target_tpl = target.get("/templates/imp-tpl")["template"]
    assert target_tpl["config"] == source_tpl["config"]
    assert target_tpl["workspaceId"] == workspaces[source_tpl["workspaceId"]]

    experiments = _mapped(target, "experiment")
    trials = _mapped(target, "trial")
    assert paused not in experiments
    for source_id in (first, second, forked):
        was = source.get(f"/experiments/{source_id}")
        now = target.get(f"/experiments/{experiments[source_id]}")
        same = ("name", "description", "labels", "notes", "archived", "state", "username",
                "startTime", "endTime", "searcherType", "searcherMetric", "numTrials",
                "resourcePool")
        assert {k: now["experiment"].get(k) for k in same} == {
            k: was["experiment"].get(k) for k in same}, source_id
        assert now["experiment"]["projectId"] == projects.get(
            was["experiment"]["projectId"], was["experiment"]["projectId"])
        assert now["config"]["hyperparameters"] == was["config"]["hyperparameters"]
        assert now["config"]["searcher"] == was["config"]["searcher"]
        parent = was["experiment"].get("forkedFrom")
        assert now["experiment"].get("forkedFrom") == (experiments[parent] if parent else None)
        assert target.get(f"/experiments/{experiments[source_id]}/model_def")["b64Tgz"] == \
            source.get(f"/experiments/{source_id}/model_def")["b64Tgz"]
        source_trials = source.trials(source_id)
        target_trials = target.trials(experiments[source_id])
        assert [trials[t["id"]] for t in source_trials] == [t["id"] for t in target_trials]
        for was_trial, now_trial in zip(source_trials, target_trials, strict=True):
            same = ("hparams", "state", "restarts", "startTime", "endTime",
                    "totalBatchesProcessed", "searcherMetricValue")
            assert {k: now_trial.get(k) for k in same} == {k: was_trial.get(k) for k in same}
            assert now_trial["experimentId"] == experiments[source_id]
            _same_reports(source, target, was_trial["id"], now_trial["id"])
            _same_checkpoints(source, target, was_trial["id"], now_trial["id"])
            _same_logs(source, target, was_trial["id"], now_trial["id"])

    was_model = source.get("/models/imp-model")["model"]
    now_model = target.get("/models/imp-model")["model"]
    same = ("name", "description", "notes", "metadata", "labels", "username", "archived",
            "creationTime", "lastUpdatedTime", "numVersions")
    assert {k: now_model.get(k) for k in same} == {k: was_model.get(k) for k in same}
    assert now_model["workspaceId"] == workspaces[was_model["workspaceId"]]
    was_versions = source.get("/models/imp-model/versions")["modelVersions"]
    now_versions = target.get("/models/imp-model/versions")["modelVersions"]
    same = ("version", "name", "comment", "notes", "metadata", "labels", "username",
            "creationTime", "lastUpdatedTime")
    assert [{k: v.get(k) for k in same} for v in now_versions] == [
        {k: v.get(k) for k in same} for v in was_versions]
    assert [v["checkpoint"]["uuid"] for v in now_versions] == [
        v["checkpoint"]["uuid"] for v in was_versions]


def _same_reports(source: Cluster, target: Cluster, was: int, now: int) -> None:
    def reports(cluster: Cluster, trial_id: int) -> list[tuple[Any, ...]]:
        return [(m["group"], m["stepsCompleted"], m["reportTime"], m["metrics"])
                for m in cluster.get(f"/trials/{trial_id}/metrics")["metrics"]]
    was_reports = reports(source, was)
    assert {r[0] for r in was_reports} == {"training", "validation", "inference"}
    assert reports(target, now) == was_reports


def _same_checkpoints(source: Cluster, target: Cluster, was: int, now: int) -> None:
    def checkpoints(cluster: Cluster, trial_id: int) -> list[dict[str, Any]]:
        found = cluster.get(f"/trials/{trial_id}/checkpoints")["checkpoints"]
        return [{k: c.get(k) for k in ("uuid", "state", "reportTime", "resources", "metadata")}
                for c in found]
    was_checkpoints = checkpoints(source, was)
    assert was_checkpoints and checkpoints(target, now) == was_checkpoints


def _same_logs(source: Cluster, target: Cluster, was: int, now: int) -> None:
    def lines(cluster: Cluster, trial_id: int) -> list[tuple[str, str]]:
        return [(line["timestamp"], line["log"]) for line in cluster.trial_logs(trial_id)]
    was_lines = lines(source, was)
    now_lines = lines(target, now)
    assert len(now_lines) == len(was_lines)  # the killed run's half is not doubled
    assert now_lines == was_lines


def test_an_imported_checkpoint_downloads_and_an_imported_experiment_forks(
    clusters: Clusters, imported: dict[str, Any]
) -> None:
    source, target = clusters.source, clusters.target
    first = clusters.made["experiments"][0]
    [checkpoint] = source.get(f"/experiments/{first}/checkpoints")["checkpoints"]
    det_home = clusters.work / "det-target"
    det_home.mkdir()
    env = {"HOME": str(det_home), "PATH": os.environ["PATH"], "DET_USER": "admin",
           "DET_PASS": target.secrets["admin_password"]}
    out = clusters.work / "downloaded"
    downloaded = subprocess.run(
        [str(clusters.det_venv / "det"), "-m", target.url, "checkpoint", "download",
         checkpoint["uuid"], "--output-dir", str(out)], env=env, capture_output=True,
        text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert downloaded.returncode == 0, downloaded.stdout + downloaded.stderr
    assert (out / "weights.txt").read_text() == f"weights of {checkpoint['uuid']}"

    experiments = _mapped(target, "experiment")
    forked = target.run("experiment", "fork", str(experiments[first])).stdout
    child = int(forked.split("Created experiment ", 1)[1].split()[0])
    wait_for(lambda: target.experiment(child)["state"] in TERMINAL, 180,
             "the fork of an imported experiment to end", interval=0.5)
    assert target.experiment(child)["state"] == "STATE_COMPLETED", target.failure_logs()
    assert target.experiment(child)["forkedFrom"] == experiments[first]
    assert target.experiment(experiments[first])["state"] == "STATE_COMPLETED"
