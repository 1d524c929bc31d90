"""The Determined Core API example in task containers (the Docker runtime).

Epochal's task image has no `determined`, so the test lends it the one in `.venv-det`: its
site-packages bind-mounted read-only and put on PYTHONPATH by the entrypoint (a Determined user
would name an image with `determined` installed instead). The container finds its cluster info at
/run/determined/info and its checkpoint storage at the host path, as Determined's code expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.determined.test_core_api_e2e import EXAMPLE
from tests.e2e.cluster import Cluster, created_id, docker_runtime_cluster

pytestmark = pytest.mark.slow

SITE_IN_CONTAINER = "/opt/determined-site"


@pytest.fixture(scope="module")
def docker_cluster(postgres_url: str, temporal_address: str,
                   task_image: str) -> Iterator[Cluster]:
    with docker_runtime_cluster(postgres_url, temporal_address, "det-docker", 1) as cluster:
        yield cluster


def test_core_api_script_runs_in_a_task_container(docker_cluster: Cluster, det_venv: Path,
                                                  tmp_path: Path) -> None:
    site = next((det_venv.parent / "lib").glob("python3*/site-packages"))
    config = yaml.safe_load((EXAMPLE / "const.yaml").read_text())
    config["entrypoint"] = f"PYTHONPATH={SITE_IN_CONTAINER} python3 train.py"
    config["bind_mounts"] = [{"host_path": str(site), "container_path": SITE_IN_CONTAINER,
                              "read_only": True}]
    config["searcher"]["max_length"] = {"batches": 100}
    path = tmp_path / "docker.yaml"
    path.write_text(yaml.safe_dump(config))
    created = docker_cluster.run("experiment", "create", str(path), str(EXAMPLE), "--follow",
                                 timeout=600)
    experiment_id = created_id(created.stdout)
    headers = docker_cluster.headers
    trials = httpx.get(f"{docker_cluster.url}/api/v1/experiments/{experiment_id}/trials",
                       headers=headers).json()["trials"]
    [trial] = trials
    assert trial["state"] == "STATE_COMPLETED", created.stdout + created.stderr
    checkpoints = httpx.get(f"{docker_cluster.url}/api/v1/trials/{trial['id']}/checkpoints",
                            headers=headers).json()["checkpoints"]
    assert [c["metadata"]["steps_completed"] for c in checkpoints] == [50, 100]
    latest = Path(checkpoints[-1]["storagePath"])
    assert (latest / "weights.npy").is_file()  # written in the container, found on the host
