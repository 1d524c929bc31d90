"""The Determined Core API example, and a PyTorchTrial, in task containers (the Docker runtime).

Epochal's task image has no `determined`, so the tests lend it the one in the Determined venv (with
torch): its site-packages bind-mounted read-only, on PYTHONPATH or where the image's Python
looks for site packages (a Determined user would name an image with `determined` installed
instead). The container finds its cluster info at /run/determined/info, the clean model copy at
/run/determined/train/model and its checkpoint storage at the host path, as Determined's code
expects.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.determined.det_venv import VENV_DIR
from tests.determined.test_core_api_e2e import EXAMPLE
from tests.e2e.cluster import Cluster, created_id, docker_runtime_cluster

pytestmark = pytest.mark.slow

SITE_IN_CONTAINER = "/opt/determined-site"
# Where the task image's Debian Python looks for locally installed packages.
LOCAL_SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
PYTORCH_TRIAL = Path(__file__).resolve().parent / "pytorch_trial"


@pytest.fixture(scope="module")
def docker_cluster(postgres_url: str, temporal_address: str,
                   task_image: str) -> Iterator[Cluster]:
    # The tests mount Determined's packages from the Determined venv into the container;
    # the master lets trials mount only what its roots allow.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EPOCHAL_STORAGE_ROOTS", f"/tmp:{VENV_DIR}")
        with docker_runtime_cluster(postgres_url, temporal_address, "det-docker",
                                    1) as cluster:
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


def test_a_pytorch_trial_runs_in_a_task_container(docker_cluster: Cluster, det_venv: Path,
                                                  tmp_path: Path) -> None:
    """Its config and entrypoint (Determined's torch_distributed launcher) as they are; only the
    packages are lent to the image."""
    site = next((det_venv.parent / "lib").glob("python3*/site-packages"))
    config = yaml.safe_load((PYTORCH_TRIAL / "const.yaml").read_text())
    config["bind_mounts"] = [{"host_path": str(site), "container_path": LOCAL_SITE_PACKAGES,
                              "read_only": True}]
    config["hyperparameters"].update(batches=60, seconds_per_batch=0.0)
    path = tmp_path / "pytorch.yaml"
    path.write_text(yaml.safe_dump(config))
    created = docker_cluster.run("experiment", "create", str(path), str(PYTORCH_TRIAL),
                                 "--follow", timeout=600)
    experiment_id = created_id(created.stdout)
    headers = docker_cluster.headers
    [trial] = httpx.get(f"{docker_cluster.url}/api/v1/experiments/{experiment_id}/trials",
                        headers=headers).json()["trials"]
    assert trial["state"] == "STATE_COMPLETED", created.stdout + created.stderr
    assert trial["totalBatchesProcessed"] == 60
    checkpoints = httpx.get(f"{docker_cluster.url}/api/v1/trials/{trial['id']}/checkpoints",
                            headers=headers).json()["checkpoints"]
    latest = Path(checkpoints[-1]["storagePath"])
    # Determined copied the read-only model copy into the checkpoint, on the host's storage.
    assert {"train.py", "const.yaml"} <= {p.name for p in (latest / "code").iterdir()}
