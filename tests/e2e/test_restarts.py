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
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from common.processes import free_port, read_pid
from deploy.local_cluster import load_settings
from deploy.postgres import EmbeddedPostgres
from tests.e2e.cluster import Cluster
from tests.e2e.test_faults import restart_during_training

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
        EPOCHAL_AUTH_FILE=str(state_dir / "auth.json"),
    )
    temporal_port = free_port()
    cluster = Cluster(env, f"http://127.0.0.1:{port}", state_dir,
                      f"127.0.0.1:{temporal_port}", "default")
    try:
        cluster.run(
            "cluster", "up", "--api-port", str(port), "--temporal-port", str(temporal_port),
            "--temporal-ui-port", str(free_port()), "--postgres-port", str(free_port()),
            "--slots", "1",
        )
        yield cluster
    finally:
        cluster.run("cluster", "down", check=False)
        shutil.rmtree(state_dir, ignore_errors=True)


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
