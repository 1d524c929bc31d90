"""Determined 0.38.1's `det` administering experiments on an Epochal cluster: log retention
(`det trial|experiment set log-retention`, `det task cleanup-logs`), `det checkpoint delete`,
`det experiment set gc-policy`, `det preview-search`, `det experiment delete-tb-files`, and
`det trial logs` in the order lines were produced.

One local cluster (real master and agent processes) whose trials run a Determined Core API
script in the Determined venv (`cluster up --task-env`); the real `det` binary as the admin and
as a second user, created with `det user create`, who is refused on the admin's experiments.
Each check reads the effect back: files gone from the checkpoint storage, logs gone, rows
DELETED, the preview's numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.determined.test_det_cli import Det, refused, table_rows
from tests.e2e.cluster import Cluster, shared_servers_cluster

pytestmark = pytest.mark.slow

# Validation losses by step: step 20's checkpoint is the best, step 30's the latest.
SCRIPT = textwrap.dedent('''
    import determined as det

    LOSSES = {10: 0.5, 20: 0.3, 30: 0.4}
    with det.core.init(tensorboard_mode=det.core.TensorboardMode.MANUAL) as core:
        for step, loss in LOSSES.items():
            print(f"training to step {step}", flush=True)
            core.train.report_training_metrics(steps_completed=step, metrics={"loss": loss})
            core.train.report_validation_metrics(steps_completed=step,
                                                 metrics={"validation_loss": loss})
            with core.checkpoint.store_path({"steps_completed": step}) as (path, _):
                (path / "weights.txt").write_text(str(step))
        board = core.train.get_tensorboard_path()
        board.mkdir(parents=True, exist_ok=True)
        (board / "events.out.tfevents.1.test").write_bytes(b"an event")
        core.train.upload_tensorboard_files()
''')
EXPERIMENTS = ("gc", "delete", "trial-logs", "experiment-logs", "kept-logs", "tensorboard")


@dataclass
class Finished:
    experiment_id: int
    trial_id: int


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, det_venv: Path) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "det-admin", "--slots", "2",
                                "--runtime", "process", "--task-env",
                                str(det_venv.parent)) as c:
        yield c


def _det(cluster: Cluster, det_cli: Path, home: Path, user: str, password: str) -> Det:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "DET_MASTER": cluster.url,
           "DET_USER": user, "DET_PASS": password, "PYTHONWARNINGS": "ignore"}
    return Det(det_cli, cluster.url, env)


@pytest.fixture(scope="module")
def det(cluster: Cluster, det_cli: Path, tmp_path_factory: pytest.TempPathFactory) -> Det:
    return _det(cluster, det_cli, tmp_path_factory.mktemp("admin-home"), "admin",
                cluster.secrets["admin_password"])


@pytest.fixture(scope="module")
def other(det: Det, cluster: Cluster, det_cli: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Det:
    """A second, ordinary user, made by the admin with `det user create`."""
    name = f"other-{uuid.uuid4().hex[:6]}"
    det.run("user", "create", name, "--password", "A-long-passw0rd")
    return _det(cluster, det_cli, tmp_path_factory.mktemp("other-home"), name,
                "A-long-passw0rd")


@pytest.fixture(scope="module")
def finished(det: Det, cluster: Cluster,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Finished]:
    """One ended experiment per test that changes one (all created first: they run side by
    side), each keeping all three of its checkpoints when it ends."""
    directory = tmp_path_factory.mktemp("admin-experiments")
    model = directory / "model"
    model.mkdir()
    (model / "train.py").write_text(SCRIPT)
    created = {}
    for name in EXPERIMENTS:
        config = directory / f"{name}.yaml"
        config.write_text(yaml.safe_dump({
            "name": f"admin-{name}", "entrypoint": "python3 train.py", "max_restarts": 0,
            "searcher": {"name": "single", "metric": "validation_loss",
                         "max_length": {"batches": 30}},
            "checkpoint_storage": {"save_trial_latest": 3, "save_trial_best": 3},
        }))
        out = det.run("experiment", "create", str(config), str(model)).stdout
        match = re.search(r"Created experiment (\d+)", out)
        assert match, out
        created[name] = int(match.group(1))
    found = {}
    for name, experiment_id in created.items():
        det.run("experiment", "wait", "--polling-interval", "1", str(experiment_id),
                timeout=300)
        assert cluster.experiment(experiment_id)["state"] == "STATE_COMPLETED", name
        (trial,) = cluster.trials(experiment_id)
        found[name] = Finished(experiment_id, trial["id"])
    return found


def checkpoints(cluster: Cluster, trial_id: int) -> dict[int, dict[str, Any]]:
    """The trial's checkpoints by step."""
    rows = cluster.get(f"/trials/{trial_id}/checkpoints")["checkpoints"]
    return {c["metadata"]["steps_completed"]: c for c in rows}


def run_with_input(det: Det, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`det ARGS` answering its prompts with `text`."""
    return subprocess.run([str(det.binary), "-m", det.url, *args], env=det.env, input=text,
                          capture_output=True, text=True, timeout=120)


def test_preview_search_prints_what_the_searcher_would_do(det: Det, tmp_path: Path) -> None:
    config = tmp_path / "asha.yaml"
    config.write_text(yaml.safe_dump({
        "name": "preview", "entrypoint": "python3 train.py",
        "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
        "searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 16,
                     "max_length": {"batches": 1000}, "mode": "aggressive", "divisor": 4},
    }))
    out = det.run("preview-search", str(config)).stdout
    assert "Using search configuration:" in out
    assert "name: adaptive_asha" in out and "max_trials: 16" in out
    # One bracket of 3 rungs: 16 trials reach 62 batches, 4 of them 250, 1 the whole 1000.
    assert table_rows(out) == [["12", "train for 62 batches"], ["3", "train for 250 batches"],
                               ["1", "train for 1000 batches"]]

    config.write_text(yaml.safe_dump({"searcher": {"name": "random", "metric": "loss",
                                                   "max_trials": 5}}))
    assert table_rows(det.run("preview-search", str(config)).stdout) == [
        ["5", "train to completion"]]

    config.write_text(yaml.safe_dump({"searcher": {"name": "adaptive_asha", "metric": "loss",
                                                   "max_length": {"batches": 100}}}))
    refused(det.run("preview-search", str(config), check=False), "max_trials")


def test_set_gc_policy_previews_then_deletes(det: Det, other: Det, cluster: Cluster,
                                             finished: dict[str, Finished]) -> None:
    exp, trial = finished["gc"].experiment_id, finished["gc"].trial_id
    policy = ("--save-experiment-best", "0", "--save-trial-best", "1",
              "--save-trial-latest", "0")
    refused(run_with_input(other, "y\n", "experiment", "set", "gc-policy", str(exp), *policy),
            "may not")
    before = checkpoints(cluster, trial)
    assert {step: c["state"] for step, c in before.items()} == {
        10: "STATE_COMPLETED", 20: "STATE_COMPLETED", 30: "STATE_COMPLETED"}

    out = run_with_input(det, "n\n", "experiment", "set", "gc-policy", str(exp), *policy)
    assert out.returncode == 0, out.stderr
    # The best (step 20) stays; Determined's CLI counts the rest as "without validations".
    assert ("This policy will delete 0 checkpoints with validations and 2 checkpoints without"
            " validations.") in out.stdout
    assert "Aborting operations." in out.stdout
    assert all(c["state"] == "STATE_COMPLETED" for c in checkpoints(cluster, trial).values())

    out = run_with_input(det, "y\n", "experiment", "set", "gc-policy", str(exp), *policy)
    assert out.returncode == 0, out.stderr
    assert f"Set GC policy of experiment {exp} to" in out.stdout
    after = checkpoints(cluster, trial)
    assert {step: c["state"] for step, c in after.items()} == {
        10: "STATE_DELETED", 20: "STATE_COMPLETED", 30: "STATE_DELETED"}
    assert not Path(before[10]["storagePath"]).exists()
    assert not Path(before[30]["storagePath"]).exists()
    assert (Path(before[20]["storagePath"]) / "weights.txt").read_text() == "20"
    storage = cluster.get(f"/experiments/{exp}")["config"]["checkpoint_storage"]
    assert (storage["save_experiment_best"], storage["save_trial_best"],
            storage["save_trial_latest"]) == (0, 1, 0)


def test_checkpoint_delete(det: Det, other: Det, cluster: Cluster,
                           finished: dict[str, Finished]) -> None:
    trial = finished["delete"].trial_id
    by_step = checkpoints(cluster, trial)
    first, best, last = (by_step[s]["uuid"] for s in (10, 20, 30))
    refused(other.run("checkpoint", "delete", first, "--yes", check=False), "may not")
    assert Path(by_step[10]["storagePath"]).is_dir()

    model = f"kept-{uuid.uuid4().hex[:6]}"
    det.run("model", "create", model)
    det.run("model", "register-version", model, best)
    model_id = cluster.get(f"/models/{model}")["model"]["id"]
    said = refused(det.run("checkpoint", "delete", f"{first},{best}", "--yes", check=False),
                   "are in the model registry and cannot be deleted")
    assert f"{best}, registered to {model} (model #{model_id}), version 1" in said
    assert all(c["state"] == "STATE_COMPLETED" for c in checkpoints(cluster, trial).values())

    out = det.run("checkpoint", "delete", f"{first},{last}", "--yes").stdout
    assert f"Deletion of checkpoints {first},{last} is in progress" in out
    after = checkpoints(cluster, trial)
    assert (after[10]["state"], after[20]["state"], after[30]["state"]) == (
        "STATE_DELETED", "STATE_COMPLETED", "STATE_DELETED")
    assert not Path(by_step[10]["storagePath"]).exists()
    assert not Path(by_step[30]["storagePath"]).exists()
    assert Path(by_step[20]["storagePath"]).is_dir()
    refused(det.run("checkpoint", "delete", str(uuid.uuid4()), "--yes", check=False),
            "not found")


def test_log_retention_deletes_expired_logs(det: Det, other: Det, cluster: Cluster,
                                            finished: dict[str, Finished]) -> None:
    by_trial, by_experiment, kept = (finished[n] for n in (
        "trial-logs", "experiment-logs", "kept-logs"))
    refused(other.run("trial", "set", "log-retention", str(by_trial.trial_id), "--days", "0",
                      check=False), "may not")
    refused(other.run("experiment", "set", "log-retention", str(by_experiment.experiment_id),
                      "--forever", check=False), "may not")
    det.run("trial", "set", "log-retention", str(by_trial.trial_id), "--days", "0")
    det.run("experiment", "set", "log-retention", str(by_experiment.experiment_id),
            "--days", "0")
    det.run("experiment", "set", "log-retention", str(kept.experiment_id), "--days", "30")
    # The bound is the server's too (the CLI checks it first).
    answer = httpx.put(f"{cluster.url}/api/v1/trials/{kept.trial_id}/retain_logs",
                       json={"numDays": 40000}, headers=cluster.headers, timeout=30)
    assert answer.status_code == 400 and "numDays" in answer.text

    expiring = (len(cluster.trial_logs(by_trial.trial_id))
                + len(cluster.trial_logs(by_experiment.trial_id)))
    assert expiring > 0
    refused(other.run("task", "cleanup-logs", check=False), "admin")
    out = det.run("task", "cleanup-logs").stdout
    assert out.strip() == f"Deleted {expiring} rows of log entries."
    for gone in (by_trial, by_experiment):
        printed = det.run("trial", "logs", str(gone.trial_id)).stdout.splitlines()
        assert printed == [f"Trial log stream ended. To reopen log stream, run: det trial logs"
                           f" -f {gone.trial_id}"]
    assert "training to step 30" in det.run("trial", "logs", str(kept.trial_id)).stdout


def test_delete_tb_files(det: Det, other: Det, cluster: Cluster,
                         finished: dict[str, Finished]) -> None:
    exp, trial = finished["tensorboard"].experiment_id, finished["tensorboard"].trial_id
    cluster_id = cluster.get("/master")["clusterId"]
    storage = Path(cluster.get(f"/experiments/{exp}")["config"]["checkpoint_storage"]
                   ["host_path"])
    boards = storage / cluster_id / "tensorboard" / "experiment" / str(exp)
    uploaded = boards / "trial" / str(trial) / "events.out.tfevents.1.test"
    assert uploaded.read_bytes() == b"an event"  # what Determined's Core API uploaded

    refused(other.run("experiment", "delete-tb-files", str(exp), check=False), "may not")
    assert uploaded.exists()
    det.run("experiment", "delete-tb-files", str(exp))
    assert not boards.exists()
    assert all(Path(c["storagePath"]).is_dir() for c in checkpoints(cluster, trial).values())


def test_trial_logs_print_in_the_order_lines_were_produced(
    det: Det, cluster: Cluster, finished: dict[str, Finished]
) -> None:
    """Lines are shipped in batches and the master writes its own at once, so a line can
    arrive after lines produced later: `det trial logs` still prints them as produced."""
    exp, trial = finished["gc"].experiment_id, finished["gc"].trial_id
    soon = datetime.now(UTC) + timedelta(days=1)  # after every line the trial printed
    for offset, text in ((2, "produced second"), (1, "produced first")):  # arrival order
        line = {"taskId": f"{exp}.{trial}", "allocationId": f"{exp}.{trial}.1",
                "timestamp": (soon + timedelta(seconds=offset)).isoformat(),
                "stdtype": "stdout", "log": f"{text}\n"}
        answer = httpx.post(f"{cluster.url}/api/v1/task/logs", json={"logs": [line]},
                            headers=cluster.headers, timeout=30)
        assert answer.status_code == 200, answer.text

    printed = det.run("trial", "logs", str(trial)).stdout.splitlines()
    steps = [(i, line.rsplit(" ", 1)[-1]) for i, line in enumerate(printed)
             if "training to step" in line]
    first = next(i for i, line in enumerate(printed) if line.endswith("produced first"))
    second = next(i for i, line in enumerate(printed) if line.endswith("produced second"))
    assert [step for _, step in steps] == ["10", "20", "30"]
    assert steps[-1][0] < first < second
    tail = det.run("trial", "logs", str(trial), "--tail", "2").stdout.splitlines()
    assert [line.rsplit("|| ", 1)[-1] for line in tail[:2]] == [
        "produced first", "produced second"]
