"""End to end, as a user works: `epochal cluster up`, then experiments driven with the CLI.

The cluster runs the real master and agent processes; it uses the session's PostgreSQL (a fresh
database) and Temporal dev server (its own namespace) through EPOCHAL_DB_URL and
EPOCHAL_TEMPORAL_ADDRESS, the way a cluster on external servers is configured.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from deploy.processes import free_port
from tests.e2e.cluster import (
    DIGITS,
    EPOCHAL,
    Cluster,
    created_id,
    shared_servers_cluster,
    wait_for,
)

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "e2e", "--slots", "2") as c:
        assert c.up is not None and f"{c.url}/" in c.up.stdout  # the dashboard address
        yield c


def test_grid_search_runs_to_completion(cluster: Cluster) -> None:
    result = cluster.run(
        "experiment", "create", "examples/digits/grid.yaml", "examples/digits", "--follow"
    )
    experiment_id = created_id(result.stdout)
    assert "Best trial:" in result.stdout

    trials = cluster.json("experiment", "describe", str(experiment_id))["trials"]
    assert len(trials) == 6
    assert {t["state"] for t in trials} == {"STATE_COMPLETED"}
    assert all(t["bestValidation"]["metrics"]["avgMetrics"]["accuracy"] > 0 for t in trials)
    assert {(t["hparams"]["learning_rate"], t["hparams"]["hidden_size"]) for t in trials} == {
        (lr, h) for lr in (0.001, 0.01, 0.1) for h in (16, 64)
    }

    checkpoints = cluster.json("checkpoint", "list", str(experiment_id))["checkpoints"]
    kept = [c for c in checkpoints if c["state"] == "STATE_COMPLETED"]
    assert {c["training"]["trialId"] for c in kept} == {t["id"] for t in trials}
    assert all(Path(c["storagePath"]).is_dir() for c in kept)
    deleted = [c for c in checkpoints if c["state"] == "STATE_DELETED"]
    assert deleted and not any(Path(c["storagePath"]).exists() for c in deleted)

    logs = cluster.run("trial", "logs", str(trials[0]["id"])).stdout
    assert "validation" in logs.lower()
    listed = cluster.run("experiment", "list").stdout
    assert "digits-grid" in listed


def long_single_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["name"] = "digits-long"
    config["searcher"]["max_length"] = {"batches": 2_000_000}
    config["hyperparameters"]["validation_period"] = 100_000
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def trial_of(cluster: Cluster, experiment_id: int) -> dict[str, Any]:
    described = cluster.json("experiment", "describe", str(experiment_id))
    return described["trials"][0]


def experiment_state(cluster: Cluster, experiment_id: int) -> str:
    return cluster.json("experiment", "describe", str(experiment_id))["experiment"]["state"]


def training_processes(cluster: Cluster) -> list[psutil.Process]:
    work = str(cluster.state_dir / "agent")
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and (proc.info["cwd"] or "").startswith(
                work
            ):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_pause_activate_and_kill(cluster: Cluster, tmp_path: Path) -> None:
    result = cluster.run(
        "experiment", "create", str(long_single_config(tmp_path)), "examples/digits"
    )
    experiment_id = created_id(result.stdout)
    wait_for(
        lambda: trial_of(cluster, experiment_id)["totalBatchesProcessed"] > 0,
        what="the first training metrics",
    )

    cluster.run("experiment", "pause", str(experiment_id))
    wait_for(
        lambda: trial_of(cluster, experiment_id)["state"] == "STATE_PAUSED",
        what="the trial to pause",
    )
    assert experiment_state(cluster, experiment_id) == "STATE_PAUSED"
    paused = trial_of(cluster, experiment_id)
    assert paused["latestCheckpointUuid"], "a preempted trial checkpoints before it stops"
    wait_for(lambda: not training_processes(cluster), what="the training process to exit")

    cluster.run("experiment", "activate", str(experiment_id))
    wait_for(
        lambda: (
            trial_of(cluster, experiment_id)["runId"] == 2
            and trial_of(cluster, experiment_id)["state"] == "STATE_RUNNING"
        ),
        what="the trial to run again",
    )
    logs = wait_for(
        lambda: (
            "resumed from checkpoint"
            in (out := cluster.run("trial", "logs", str(paused["id"])).stdout)
            and out
        ),
        what="the resumed run's log line",
    )
    assert paused["latestCheckpointUuid"] in logs

    cluster.run("experiment", "kill", str(experiment_id))
    wait_for(
        lambda: experiment_state(cluster, experiment_id) == "STATE_CANCELED",
        timeout=30,
        what="the experiment to be canceled",
    )
    assert trial_of(cluster, experiment_id)["state"] == "STATE_CANCELED"
    wait_for(
        lambda: not training_processes(cluster),
        timeout=15,
        what="the killed training process to be gone",
    )
    denied = cluster.run("experiment", "activate", str(experiment_id), check=False)
    assert denied.returncode == 1
    assert "CANCELED" in denied.stderr


def test_bad_input_is_refused_before_anything_is_stored(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.json("experiment", "list", "--all")
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("name: [unclosed\n")
    result = cluster.run("experiment", "create", str(bad_yaml), "examples/digits", check=False)
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr and "Traceback" not in result.stderr

    typo = yaml.safe_load((DIGITS / "single.yaml").read_text())
    typo["searcher"]["metirc"] = typo["searcher"].pop("metric")
    typo_path = tmp_path / "typo.yaml"
    typo_path.write_text(yaml.safe_dump(typo))
    result = cluster.run("experiment", "create", str(typo_path), "examples/digits", check=False)
    assert result.returncode == 2
    assert 'did you mean "metric"' in result.stderr

    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    result = cluster.run(
        "experiment", "create", "examples/digits/single.yaml", str(empty_dir), check=False
    )
    assert result.returncode == 2
    assert "train.py" in result.stderr

    after = cluster.json("experiment", "list", "--all")
    assert len(after["experiments"]) == len(before["experiments"])

    env = {**cluster.env, "EPOCHAL_MASTER": f"http://127.0.0.1:{free_port()}"}
    result = subprocess.run(
        [*EPOCHAL, "experiment", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "cannot reach the master" in result.stderr and "Traceback" not in result.stderr


def test_adaptive_asha_stops_trials_early_and_trains_the_best_to_the_end(cluster: Cluster) -> None:
    result = cluster.run(
        "experiment", "create", "examples/digits/adaptive.yaml", "examples/digits", "--follow",
        timeout=300,
    )
    experiment_id = created_id(result.stdout)
    described = cluster.json("experiment", "describe", str(experiment_id))
    trials = described["trials"]
    assert len(trials) == 16
    assert {t["state"] for t in trials} == {"STATE_COMPLETED"}
    stopped = [t for t in trials if (t["searcherStatus"] or "").startswith("stopped early")]
    assert stopped, "adaptive ASHA stopped no trial early"
    assert all(t["totalBatchesProcessed"] < 20000 for t in stopped)
    best = next(t for t in trials if t["id"] == described["experiment"]["bestTrialId"])
    assert best["totalBatchesProcessed"] == 20000  # the best was promoted to the full length
    assert sum(t["totalBatchesProcessed"] for t in trials) < 16 * 20000 / 2
    shown = cluster.run("experiment", "describe", str(experiment_id)).stdout
    assert "stopped early at rung 0" in shown


def test_users_log_in_and_may_not_touch_others_experiments(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert "admin /" in (cluster.up.stdout if cluster.up else "")  # says how to log in
    name = f"bob{free_port()}"
    created = cluster.run("user", "create", name, env_extra={"EPOCHAL_PASSWORD": "bobs-password"})
    assert f"Created user {name}" in created.stdout
    assert name in cluster.run("user", "list").stdout
    assert "'admin' (admin)" in cluster.run("user", "whoami").stdout

    bob = {"EPOCHAL_AUTH_FILE": str(tmp_path / "bob.json")}
    refused = cluster.run("experiment", "list", check=False, env_extra=bob)
    assert refused.returncode == 1 and "not logged in" in refused.stderr
    wrong = cluster.run("user", "login", name, check=False,
                        env_extra={**bob, "EPOCHAL_PASSWORD": "not-it-at-all"})
    assert wrong.returncode == 1 and "invalid username or password" in wrong.stderr
    cluster.run("user", "login", name, env_extra={**bob, "EPOCHAL_PASSWORD": "bobs-password"})
    assert f"'{name}'" in cluster.run("user", "whoami", env_extra=bob).stdout

    admins = created_id(cluster.run(
        "experiment", "create", str(long_single_config(tmp_path)), str(DIGITS)).stdout)
    kill = cluster.run("experiment", "kill", str(admins), check=False, env_extra=bob)
    assert kill.returncode == 1 and "belongs to admin" in kill.stderr
    cluster.run("experiment", "kill", str(admins))

    cluster.run("user", "logout", env_extra=bob)
    after = cluster.run("user", "whoami", check=False, env_extra=bob)
    assert after.returncode == 1 and "not logged in" in after.stderr
