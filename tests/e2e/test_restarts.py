"""The cluster's servers restart under a running experiment: a kill -9 of the Temporal dev server
(its SQLite file persists) and a restart of PostgreSQL. The experiment completes with every
training metric stored exactly once.

Unlike the other end-to-end tests, this cluster runs its own PostgreSQL and Temporal (on free
ports, in its own state directory), since the test stops them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from deploy.local_cluster import load_settings
from deploy.postgres import EmbeddedPostgres
from deploy.processes import free_port, read_pid
from tests.e2e.cluster import Cluster, wait_for
from tests.e2e.test_faults import create, slow_config, training_metrics, trials, wait_done

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[Cluster]:
    state_dir = Path(tempfile.mkdtemp(prefix="epochal-restarts-"))
    state_dir.chmod(0o755)
    port = free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("EPOCHAL_DB_URL", "EPOCHAL_TEMPORAL_ADDRESS", "EPOCHAL_TEMPORAL_NAMESPACE")
    }
    env.update(
        EPOCHAL_STATE_DIR=str(state_dir),
        EPOCHAL_MASTER=f"http://127.0.0.1:{port}",
        EPOCHAL_KILL_GRACE_SECONDS="3",
    )
    cluster = Cluster(env, f"http://127.0.0.1:{port}", state_dir)
    try:
        cluster.run(
            "cluster", "up", "--api-port", str(port), "--temporal-port", str(free_port()),
            "--temporal-ui-port", str(free_port()), "--postgres-port", str(free_port()),
            "--slots", "1",
        )
        yield cluster
    finally:
        cluster.run("cluster", "down", check=False)
        shutil.rmtree(state_dir, ignore_errors=True)


def restart_during_training(
    cluster: Cluster, tmp_path: Path, name: str, stop: Callable[[], None]
) -> None:
    experiment_id = create(cluster, slow_config(tmp_path, name, steps=40, sleep=0.2))
    wait_for(
        lambda: (t := trials(cluster, experiment_id)) and t[0]["totalBatchesProcessed"] > 5,
        timeout=90,
        what="training to start",
    )
    stop()
    time.sleep(3)  # training goes on meanwhile; its reports wait and retry
    cluster.run("cluster", "up")  # starts whatever is not running
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    trial = trials(cluster, experiment_id)[0]
    steps = [m["stepsCompleted"] for m in training_metrics(cluster, trial["id"])]
    assert steps == list(range(1, 41))


def test_a_killed_temporal_server_comes_back_and_the_experiment_completes(
    own_cluster: Cluster, tmp_path: Path
) -> None:
    def kill_temporal() -> None:
        pid = read_pid(own_cluster.state_dir / "run" / "temporal.pid")
        assert pid is not None
        process = psutil.Process(pid)
        process.kill()  # kill -9
        process.wait(10)

    restart_during_training(own_cluster, tmp_path, "temporal-restart", kill_temporal)


def test_a_restarted_postgresql_loses_nothing(own_cluster: Cluster, tmp_path: Path) -> None:
    settings = load_settings(own_cluster.state_dir)

    def stop_postgres() -> None:
        server = EmbeddedPostgres(settings.state_dir / "postgres")
        assert server.stop()

    restart_during_training(own_cluster, tmp_path, "postgres-restart", stop_postgres)
