"""End to end: a training script written for Determined's Core API runs unchanged on Epochal.

A local cluster (real master and agent processes, the process runtime) runs
examples/determined_core/train.py, config and entrypoint (`python3 train.py`) unchanged, in the
Determined venv as task environment (Determined 0.38.1, no Epochal: `cluster up --task-env`),
the way a Determined user's image provides `python3` with `determined` installed. What the
script reports is read back through Epochal's own API and CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.cluster import REPO, Cluster, SecondAgent, created_id, shared_servers_cluster
from tests.s3_fixtures import S3Server
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "determined_core"
TERMINAL = {"STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"}


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, det_venv: Path) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "det-core", "--slots", "2",
                                "--runtime", "process", "--task-env", str(det_venv.parent)) as c:
        yield c


def det_config(tmp_path: Path, name: str = "const.yaml",
               **hparams: Any) -> tuple[Path, dict[str, Any]]:
    """The example's config with some hyperparameters set (its entrypoint as it is)."""
    config = yaml.safe_load((EXAMPLE / name).read_text())
    max_batches = hparams.pop("max_batches", None)
    if max_batches:
        config["searcher"]["max_length"] = {"batches": max_batches}
    config["hyperparameters"].update(hparams)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return path, config


def get(cluster: Cluster, path: str, **params: Any) -> Any:
    answer = httpx.get(f"{cluster.url}/api/v1{path}", params=params, headers=cluster.headers,
                       timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def trials_of(cluster: Cluster, experiment_id: int) -> list[dict[str, Any]]:
    return list(get(cluster, f"/experiments/{experiment_id}/trials")["trials"])


def logs_of(cluster: Cluster, trial_id: int) -> str:
    return cluster.run("trial", "logs", str(trial_id)).stdout


def experiment_state(cluster: Cluster, experiment_id: int) -> str:
    return str(get(cluster, f"/experiments/{experiment_id}")["experiment"]["state"])


def steps(cluster: Cluster, trial_id: int, group: str) -> list[int]:
    metrics = get(cluster, f"/trials/{trial_id}/metrics", group=group)["metrics"]
    return sorted(m["stepsCompleted"] for m in metrics)


def test_core_api_script_reports_what_epochal_shows(cluster: Cluster, tmp_path: Path) -> None:
    config_path, _ = det_config(tmp_path, max_batches=200)
    created = cluster.run("experiment", "create", str(config_path), str(EXAMPLE), "--follow",
                          timeout=300)
    experiment_id = created_id(created.stdout)
    printed = created.stdout + created.stderr
    assert "records_per_epoch" in printed  # the config's warnings (profiling is acted on)
    assert "profiling" not in printed
    [trial] = trials_of(cluster, experiment_id)
    assert trial["state"] == "STATE_COMPLETED", logs_of(cluster, trial["id"])
    assert trial["progress"] == 1.0

    assert steps(cluster, trial["id"], "training") == [50, 100, 150, 200]
    assert steps(cluster, trial["id"], "validation") == [50, 100, 150, 200]
    checkpoints = get(cluster, f"/trials/{trial['id']}/checkpoints")["checkpoints"]
    assert [c["metadata"]["steps_completed"] for c in checkpoints] == [50, 100, 150, 200]
    kept = [c for c in checkpoints if c["state"] == "STATE_COMPLETED"]
    assert kept and trial["latestCheckpointUuid"] == checkpoints[-1]["uuid"]
    for checkpoint in kept:  # where Epochal's GC and restore look: host_path/<uuid>
        directory = Path(checkpoint["storagePath"])
        assert {"weights.npy", "state.json", "metadata.json"} <= {
            p.name for p in directory.iterdir()}
        assert checkpoint["resources"]["weights.npy"] > 0
    deleted = [c for c in checkpoints if c["state"] == "STATE_DELETED"]
    assert deleted and not any(Path(c["storagePath"]).exists() for c in deleted)  # GC found them

    best = get(cluster, f"/experiments/{experiment_id}/searcher/best_searcher_validation_metric")
    validations = get(cluster, f"/trials/{trial['id']}/metrics", group="validation")["metrics"]
    assert best["metric"] == min(m["metrics"]["validation_loss"] for m in validations)
    logs = logs_of(cluster, trial["id"])
    assert "Reported checkpoint to master" in logs  # Determined's own log line
    described = cluster.run("experiment", "describe", str(experiment_id)).stdout
    assert "COMPLETED" in described


def pause_and_activate(cluster: Cluster, config_path: Path) -> tuple[int, int, dict[str, Any]]:
    """Create the experiment, pause it after its first checkpoint, activate it once paused and
    wait until it completes: (experiment id, trial id, the trial as it was paused)."""
    experiment_id = created_id(
        cluster.run("experiment", "create", str(config_path), str(EXAMPLE)).stdout)
    trial_id = wait_for(lambda: trials_of(cluster, experiment_id), 60, "the trial")[0]["id"]
    wait_for(lambda: get(cluster, f"/trials/{trial_id}/checkpoints")["checkpoints"], 120,
             "a first checkpoint")
    cluster.run("experiment", "pause", str(experiment_id))
    wait_for(lambda: trials_of(cluster, experiment_id)[0]["state"] == "STATE_PAUSED", 120,
             "the trial to stop for the pause")
    paused = trials_of(cluster, experiment_id)[0]
    cluster.run("experiment", "activate", str(experiment_id))
    wait_for(lambda: experiment_state(cluster, experiment_id) == "STATE_COMPLETED", 240,
             "the experiment to complete after activate")
    return experiment_id, trial_id, paused


def test_pause_preempts_and_activate_resumes_from_the_checkpoint(
    cluster: Cluster, tmp_path: Path
) -> None:
    config_path, _ = det_config(tmp_path, max_batches=1500, validation_period=50,
                                seconds_per_batch=0.01)
    experiment_id, trial_id, paused = pause_and_activate(cluster, config_path)
    assert "preempted at batch" in logs_of(cluster, trial_id)
    assert paused["totalBatchesProcessed"] < 1500
    resume_uuid = paused["latestCheckpointUuid"]
    logs = logs_of(cluster, trial_id)
    assert f"resumed from checkpoint {resume_uuid}" in logs
    validated = steps(cluster, trial_id, "validation")
    assert validated == list(range(50, 1501, 50))  # no gap and no step trained twice
    [trial] = trials_of(cluster, experiment_id)
    assert trial["state"] == "STATE_COMPLETED" and trial["restarts"] == 0


def test_s3_checkpoints_of_determineds_client_are_restored_and_collected(
    cluster: Cluster, tmp_path: Path, s3_server: S3Server
) -> None:
    """Determined's Core API writes S3 checkpoints itself (boto3, the config's keys): Epochal
    records them once they are in the bucket, the script resumes from one after a pause
    (Determined's own download), and the experiment's end leaves the kept ones alone."""
    bucket = s3_server.bucket()
    config_path, config = det_config(tmp_path, max_batches=600, validation_period=50,
                                     seconds_per_batch=0.01)
    config["checkpoint_storage"] = s3_server.storage(bucket, prefix="det-runs")
    config_path.write_text(yaml.safe_dump(config))
    experiment_id, trial_id, paused = pause_and_activate(cluster, config_path)
    resume_uuid = paused["latestCheckpointUuid"]

    assert f"resumed from checkpoint {resume_uuid}" in logs_of(cluster, trial_id)
    checkpoints = get(cluster, f"/trials/{trial_id}/checkpoints")["checkpoints"]
    kept = [c for c in checkpoints if c["state"] == "STATE_COMPLETED"]
    assert kept and len(kept) < len(checkpoints)
    assert all(c["storagePath"] == f"s3://{bucket}/det-runs/{c['uuid']}" for c in checkpoints)
    expected = {f"det-runs/{c['uuid']}/{name}": size for c in kept
                for name, size in c["resources"].items() if not name.endswith("/")}
    wait_for(lambda: s3_server.objects(bucket) == expected, 30,
             "the bucket to hold exactly the kept checkpoints")


def test_cancel_stops_the_script_through_should_preempt(cluster: Cluster, tmp_path: Path) -> None:
    config_path, _ = det_config(tmp_path, max_batches=1_000_000,
                                validation_period=50, seconds_per_batch=0.01)
    experiment_id = created_id(
        cluster.run("experiment", "create", str(config_path), str(EXAMPLE)).stdout)
    trial_id = wait_for(lambda: trials_of(cluster, experiment_id), 60, "the trial")[0]["id"]
    wait_for(lambda: get(cluster, f"/trials/{trial_id}/checkpoints")["checkpoints"], 120,
             "a first checkpoint")
    cluster.run("experiment", "cancel", str(experiment_id))
    wait_for(lambda: experiment_state(cluster, experiment_id) == "STATE_CANCELED", 120,
             "the experiment to be canceled")
    logs = logs_of(cluster, trial_id)
    assert "preempted at batch" in logs  # the script itself saw should_preempt() and left
    [trial] = trials_of(cluster, experiment_id)
    assert trial["state"] == "STATE_CANCELED"


def test_asha_stops_trials_through_should_preempt(cluster: Cluster, tmp_path: Path) -> None:
    config_path, _ = det_config(tmp_path, "adaptive.yaml", seconds_per_batch=0.01)
    created = cluster.run("experiment", "create", str(config_path), str(EXAMPLE), "--follow",
                          timeout=400)
    experiment_id = created_id(created.stdout)
    assert experiment_state(cluster, experiment_id) == "STATE_COMPLETED"
    trials = trials_of(cluster, experiment_id)
    assert len(trials) == 8
    stopped = [t for t in trials if "stopped early" in (t["searcherStatus"] or "")]
    assert stopped, [t["searcherStatus"] for t in trials]
    assert all(t["state"] == "STATE_COMPLETED" for t in stopped)
    # A stop that reaches a trial still training comes through should_preempt() (under heavy
    # load a trial may reach the full length before its stop does; one preempted suffices).
    preempted = [t for t in stopped if t["totalBatchesProcessed"] < 400
                 and "preempted at batch" in logs_of(cluster, t["id"])]
    assert preempted, [(t["searcherStatus"], t["totalBatchesProcessed"]) for t in stopped]


# In the style of Determined's tutorials/core_api/0_start.py and 1_metrics.py: Determined 0.38's
# config has no searcher.max_length, so the script decides its length, reports training metrics
# only (no validation of the searcher metric) and finds no `core.searcher`, as on Determined.
NO_LENGTH_SCRIPT = """
import determined as det

def main(core_context, increment_by):
    try:
        core_context.searcher.operations()
    except ValueError as err:
        print("no searcher operations:", str(err).split(".")[0])
    x = 0
    for batch in range(20):
        x += increment_by
        if (batch + 1) % 5 == 0:
            core_context.train.report_training_metrics(steps_completed=batch + 1,
                                                       metrics={"x": x})
    print(f"x is now {x}")

if __name__ == "__main__":
    # MANUAL: Determined's automatic TensorBoard writer needs PyTorch or TensorFlow.
    with det.core.init(tensorboard_mode=det.core.TensorboardMode.MANUAL) as core_context:
        main(core_context, increment_by=1)
"""


def test_det_creates_a_config_without_max_length_that_completes_without_validations(
    cluster: Cluster, det_cli: Path, tmp_path: Path
) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "1_metrics.py").write_text(NO_LENGTH_SCRIPT)
    config = tmp_path / "1_metrics.yaml"
    config.write_text(
        "name: core-api-stage-1\n"
        "entrypoint: python3 1_metrics.py\n"
        "searcher:\n  name: single\n  metric: x\nmax_restarts: 0\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "DET_MASTER": cluster.url,
           "DET_USER": "admin", "DET_PASS": cluster.secrets["admin_password"],
           "PYTHONWARNINGS": "ignore"}
    created = subprocess.run(
        [str(det_cli), "-m", cluster.url, "experiment", "create", str(config),
         str(model_dir)], env=env, capture_output=True, text=True, timeout=180,
        stdin=subprocess.DEVNULL)
    assert created.returncode == 0, created.stdout + created.stderr
    found = re.search(r"Created experiment (\d+)", created.stdout)
    assert found, created.stdout
    experiment_id = int(found.group(1))
    wait_for(lambda: experiment_state(cluster, experiment_id) in
             {"STATE_COMPLETED", "STATE_ERROR"}, 180, "the experiment to end")

    experiment = get(cluster, f"/experiments/{experiment_id}")["experiment"]
    [trial] = trials_of(cluster, experiment_id)
    logs = logs_of(cluster, trial["id"])
    assert experiment["state"] == "STATE_COMPLETED", logs
    assert trial["state"] == "STATE_COMPLETED"
    assert experiment["bestTrialId"] is None
    assert "max_length" not in experiment["config"]["searcher"] or (
        experiment["config"]["searcher"]["max_length"] is None)
    assert "no searcher operations: SearcherContext was not created" in logs
    assert "x is now 20" in logs
    assert 'never reported the searcher metric "x"' in logs
    assert steps(cluster, trial["id"], "training") == [5, 10, 15, 20]
    assert trial["searcherStatus"] == 'completed without reporting the searcher metric "x"'
    described = cluster.run("experiment", "describe", str(experiment_id)).stdout
    assert "completed without reporting the searcher metric" in described


def test_determined_launcher_trains_one_trial_on_two_agents(
    cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    """Determined's own launcher and core.distributed, unchanged, across two agents."""
    agent = SecondAgent(cluster, slots=2, extra_args=("--task-env", str(det_venv.parent)))
    agent.start()
    try:
        config = {
            "name": "det-distributed",
            "entrypoint": "python3 -m determined.launch.torch_distributed python3 train.py",
            "resources": {"slots_per_trial": 4},
            "hyperparameters": {"steps": 20},
            "searcher": {"name": "single", "metric": "validation_loss"},
            "max_restarts": 0,
        }
        path = tmp_path / "distributed.yaml"
        path.write_text(yaml.safe_dump(config))
        model = Path(__file__).resolve().parent / "distributed_model"
        experiment_id = created_id(cluster.run("experiment", "create", str(path),
                                               str(model)).stdout)
        wait_for(lambda: experiment_state(cluster, experiment_id) in TERMINAL, timeout=240,
                 what="the experiment to end")
        trial = trials_of(cluster, experiment_id)[0]
        logs = logs_of(cluster, trial["id"])
        assert experiment_state(cluster, experiment_id) == "STATE_COMPLETED", logs
        assert {f"[rank={r}]" for r in range(4)} <= set(re.findall(r"\[rank=\d\]", logs))
        assert "weights identical on 4 ranks" in logs
        assert steps(cluster, trial["id"], "training") == [5, 10, 15, 20]
        # The sharded checkpoint holds every rank's file.
        checkpoints = get(cluster, f"/trials/{trial['id']}/checkpoints")["checkpoints"]
        assert set(checkpoints[-1]["resources"]) >= {f"rank-{r}.pt" for r in range(4)}
    finally:
        agent.kill()
