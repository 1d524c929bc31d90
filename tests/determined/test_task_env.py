"""A Determined user's own Python environment runs their trials: `epochal cluster up --task-env`.

One local cluster (real master and agent processes, the process runtime) whose agent runs trials
in the Determined venv (tests/determined/det_venv.py), a virtualenv with Determined 0.38.1 and
torch (CPU) but without Epochal: its `python3` is the entrypoint's and every launcher's, Epochal's
harness is reachable without being installed there, a PyTorchTrial written as Determined's
tutorials write one trains, checkpoints, pauses and resumes with the real `det` client, and code
that needs a module the environment lacks fails at once, saying so.
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

from tests.e2e.cluster import DIGITS, Cluster, created_id, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

PYTORCH_TRIAL = Path(__file__).resolve().parent / "pytorch_trial"


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, det_venv: Path) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "task-env", "--slots", "2",
                                "--runtime", "process", "--task-env", str(det_venv.parent)) as c:
        assert c.up is not None and f"task environment {det_venv.parent}" in c.up.stderr
        yield c


@pytest.fixture(scope="module")
def det(cluster: Cluster, det_cli: Path) -> list[str]:
    """The real `det` client's command line (`run_det` logs it in as admin)."""
    return [str(det_cli), "-m", cluster.url]


def run_det(cluster: Cluster, det: list[str], home: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "DET_USER": "admin",
           "DET_PASS": cluster.secrets["admin_password"], "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([*det, *args], env=env, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"det {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def get(cluster: Cluster, path: str, **params: Any) -> Any:
    answer = httpx.get(f"{cluster.url}/api/v1{path}", params=params, headers=cluster.headers,
                       timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def only_trial(cluster: Cluster, experiment_id: int) -> dict[str, Any]:
    trials = get(cluster, f"/experiments/{experiment_id}/trials")["trials"]
    assert len(trials) == 1, trials
    return dict(trials[0])


def wait_ended(cluster: Cluster, experiment_id: int, timeout: float = 240) -> str:
    ended = ("STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED")
    return str(wait_for(
        lambda: (s := get(cluster, f"/experiments/{experiment_id}")["experiment"]["state"])
        in ended and s, timeout, f"experiment {experiment_id} to end"))


def logs_of(cluster: Cluster, trial_id: int) -> str:
    return cluster.run("trial", "logs", str(trial_id)).stdout


def test_a_launcher_that_starts_python3_finds_the_task_environment(
    cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    model = tmp_path / "model"
    model.mkdir()
    # A launcher as users write them: a shell script that starts `python3` itself.
    (model / "launch.sh").write_text("#!/bin/sh\nexec python3 probe.py \"$@\"\n")
    (model / "probe.py").write_text(
        "import os, sys\n"
        "import harness\n"
        "import httpx\n"
        "print('prefix:', sys.prefix)\n"
        "print('harness:', harness.core.__name__)\n"
        "print('httpx from:', os.path.dirname(os.path.dirname(httpx.__file__)))\n"
        "print('model copy:', sorted(os.listdir('/run/determined/train/model')))\n"
        "try:\n"
        "    open('/run/determined/train/model/scratch', 'w')\n"
        "except OSError as err:\n"
        "    print('model copy writable: no,', err.strerror)\n"
    )
    config = {"name": "launcher-probe", "entrypoint": "sh launch.sh",
              "searcher": {"name": "single", "metric": "validation_loss"}}
    (tmp_path / "probe.yaml").write_text(yaml.safe_dump(config))
    experiment_id = created_id(
        cluster.run("experiment", "create", str(tmp_path / "probe.yaml"), str(model)).stdout)
    assert wait_ended(cluster, experiment_id) == "STATE_COMPLETED"
    logs = logs_of(cluster, only_trial(cluster, experiment_id)["id"])
    assert f"prefix: {det_venv.parent}" in logs
    assert "harness: harness.core" in logs  # `import harness` gives harness.core
    # The environment has no httpx: the harness took the agent's, appended to sys.path.
    assert re.search(r"httpx from: \S+/harness-fallback", logs), logs
    assert "model copy: ['launch.sh', 'probe.py']" in logs
    assert "model copy writable: no, Read-only file system" in logs


def test_an_environment_without_an_imported_module_fails_the_trial_at_once(
    cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["max_restarts"] = 3  # none is spent: another run in this environment cannot help
    (tmp_path / "single.yaml").write_text(yaml.safe_dump(config))
    experiment_id = created_id(
        cluster.run("experiment", "create", str(tmp_path / "single.yaml"), str(DIGITS)).stdout)
    assert wait_ended(cluster, experiment_id) == "STATE_ERROR"
    trial = only_trial(cluster, experiment_id)
    assert trial["state"] == "STATE_ERROR" and trial["restarts"] == 0
    logs = logs_of(cluster, trial["id"])
    assert (f"the task environment {det_venv.parent} (python3 = {det_venv.parent}/bin/python3) "
            "has no module named 'sklearn'") in logs, logs


def test_a_pytorch_trial_checkpoints_pauses_resumes_and_completes(
    cluster: Cluster, det: list[str], tmp_path: Path
) -> None:
    created = run_det(cluster, det, tmp_path, "experiment", "create",
                      str(PYTORCH_TRIAL / "const.yaml"), str(PYTORCH_TRIAL))
    match = re.search(r"Created experiment (\d+)", created)
    assert match, created
    experiment_id = int(match.group(1))
    trial_id = wait_for(lambda: get(cluster, f"/experiments/{experiment_id}/trials")["trials"],
                        120, "the trial")[0]["id"]
    wait_for(lambda: get(cluster, f"/trials/{trial_id}/checkpoints")["checkpoints"], 180,
             "a first checkpoint")

    run_det(cluster, det, tmp_path, "experiment", "pause", str(experiment_id))
    wait_for(lambda: only_trial(cluster, experiment_id)["state"] == "STATE_PAUSED", 120,
             "the trial to stop for the pause")
    paused = only_trial(cluster, experiment_id)
    assert 0 < paused["totalBatchesProcessed"] < 300, paused
    resume_uuid = paused["latestCheckpointUuid"]
    assert resume_uuid

    run_det(cluster, det, tmp_path, "experiment", "activate", str(experiment_id))
    assert wait_ended(cluster, experiment_id) == "STATE_COMPLETED", logs_of(cluster, trial_id)
    trial = only_trial(cluster, experiment_id)
    logs = logs_of(cluster, trial_id)
    assert f"Restoring trial from checkpoint {resume_uuid}" in logs  # Determined's own line
    assert trial["totalBatchesProcessed"] == 300 and trial["restarts"] == 0

    validations = get(cluster, f"/trials/{trial_id}/metrics", group="validation")["metrics"]
    assert [m["stepsCompleted"] for m in validations][-1] == 300
    assert trial["searcherMetricValue"] < 1.0
    checkpoints = [c for c in get(cluster, f"/trials/{trial_id}/checkpoints")["checkpoints"]
                   if c["state"] == "STATE_COMPLETED"]
    assert checkpoints[-1]["metadata"]["steps_completed"] == 300
    # Determined copied the clean model definition into the checkpoint's code/.
    code = Path(checkpoints[-1]["storagePath"]) / "code"
    assert {"train.py", "const.yaml"} <= {p.name for p in code.iterdir()}
    described = run_det(cluster, det, tmp_path, "experiment", "describe", str(experiment_id))
    assert "COMPLETED" in described
