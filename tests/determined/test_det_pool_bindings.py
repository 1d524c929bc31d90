"""Determined 0.38.1's own `det` for resource pools bound to workspaces, workspaces' default
pools and `det slot disable|enable`, against a real local cluster (master and agent processes)
with two pools (`default`, which the agent serves, and `gpu`, which no agent serves: what is
submitted there waits, and is killed). An admin binds; an ordinary user owns the workspaces and
submits, and is refused where Determined refuses."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from common.processes import read_pid
from tests.determined.test_det_admin import _det, _new_user
from tests.determined.test_det_cli import AGENT_ID, Det, header, refused, table_rows
from tests.e2e.cluster import Cluster, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

POOL = "gpu"


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "det-pools", "--slots", "2",
                                env_extra={"EPOCHAL_RESOURCE_POOLS": f"default,{POOL}"}) as c:
        yield c


@pytest.fixture(scope="module")
def det(cluster: Cluster, det_cli: Path, tmp_path_factory: pytest.TempPathFactory) -> Det:
    """The admin."""
    return _det(cluster, det_cli, tmp_path_factory.mktemp("det-pools-admin"), DET_USER="admin",
                DET_PASS=cluster.secrets["admin_password"])


@pytest.fixture(scope="module")
def user(det: Det, cluster: Cluster, det_cli: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Det:
    """An ordinary user, who owns the workspaces."""
    return _new_user(det, cluster, det_cli, tmp_path_factory.mktemp("det-pools-user"))[1]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("model")
    (directory / "train.py").write_text("print('done')\n")  # in `gpu`, it never runs
    return directory


def workspace(user: Det) -> str:
    name = f"ws-{uuid.uuid4().hex[:8]}"
    user.run("workspace", "create", name)
    user.run("project", "create", name, "main")
    return name


def config_file(directory: Path, workspace_name: str, pool: str | None) -> Path:
    resources = {"resource_pool": pool} if pool else {}
    path = directory / f"{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "pools", "entrypoint": "python3 train.py", "workspace": workspace_name,
        "project": "main", "resources": resources,
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}))
    return path


def create(user: Det, model: Path, config: Path) -> int:
    out = user.run("experiment", "create", str(config), str(model)).stdout
    found = re.search(r"Created experiment (\d+)", out)
    assert found, out
    return int(found.group(1))


def bound(det: Det, pool: str) -> list[list[str]]:
    out = det.run("resource-pool", "bindings", "list-workspaces", pool).stdout
    assert header(out) == ["resource pool", "workspaces"]
    return table_rows(out)


def test_bindings_refuse_other_workspaces_experiments_and_only_admins_bind(
    det: Det, user: Det, cluster: Cluster, model: Path, tmp_path: Path,
) -> None:
    mine, theirs = workspace(user), workspace(user)
    assert bound(det, POOL) == [[POOL, ""]]
    refused(user.run("resource-pool", "bindings", "add", POOL, mine, check=False), "admins")

    added = det.run("rp", "bindings", "add", POOL, mine).stdout
    assert f'added bindings between the resource pool "{POOL}"' in added
    assert bound(det, POOL) == [[POOL, mine]]
    assert bound(user, POOL) == [[POOL, mine]]  # anyone reads them

    said = refused(user.run("experiment", "create", str(config_file(tmp_path, theirs, POOL)),
                            str(model), check=False), "resources.resource_pool", POOL, theirs)
    assert mine in said
    experiment_id = create(user, model, config_file(tmp_path, mine, POOL))
    assert cluster.experiment(experiment_id)["resourcePool"] == POOL
    # Nor does it move, while it runs, to a workspace that may not use its pool.
    refused(user.run("experiment", "move", str(experiment_id), theirs, "main", check=False),
            "destinationProjectId", POOL, theirs)
    det.run("experiment", "kill", str(experiment_id))

    pools = user.run("workspace", "list-pools", theirs).stdout
    assert table_rows(pools) == [[theirs, "default"]]
    assert table_rows(user.run("workspace", "list-pools", mine).stdout) == [
        [mine, f"default, {POOL}"]]

    det.run("rp", "bindings", "replace", POOL, mine, theirs)
    assert bound(det, POOL) == [[POOL, ", ".join(sorted((mine, theirs), key=_id_order(det)))]]
    det.run("rp", "bindings", "remove", POOL, mine)
    assert bound(det, POOL) == [[POOL, theirs]]
    refused(det.run("rp", "bindings", "remove", POOL, mine, check=False), "is not bound")
    refused(det.run("rp", "bindings", "add", "default", mine, check=False), "default")
    refused(det.run("rp", "bindings", "add", "no-such-pool", mine, check=False),
            "no-such-pool")
    refused(det.run("rp", "bindings", "add", POOL, "no-such-workspace", check=False),
            "no-such-workspace")
    det.run("rp", "bindings", "remove", POOL, theirs)
    assert bound(det, POOL) == [[POOL, ""]]


def _id_order(det: Det) -> object:
    """Workspace names in the order of their ids (how `det` lists a pool's workspaces)."""
    ids = {w["name"]: w["id"] for w in json.loads(det.run("workspace", "list", "--json").stdout)}
    return lambda name: ids[name]


def test_a_workspaces_default_pool_takes_experiments_that_name_none(
    det: Det, user: Det, cluster: Cluster, model: Path, tmp_path: Path,
) -> None:
    ws = workspace(user)
    edited = user.run("workspace", "edit", ws, "--default-compute-pool", POOL, "--json").stdout
    assert json.loads(edited)["defaultComputePool"] == POOL
    rows = table_rows(user.run("workspace", "describe", ws).stdout)
    assert rows[0][7] == POOL  # Default Compute Pool
    experiment_id = create(user, model, config_file(tmp_path, ws, None))
    assert cluster.experiment(experiment_id)["resourcePool"] == POOL
    det.run("experiment", "kill", str(experiment_id))
    refused(user.run("workspace", "edit", ws, "--default-aux-pool", "no-such-pool",
                     check=False), "defaultAuxResourcePool", "no-such-pool")
    user.run("workspace", "edit", ws, "--default-compute-pool", "")
    experiment_id = create(user, model, config_file(tmp_path, ws, None))
    assert cluster.experiment(experiment_id)["resourcePool"] == "default"
    det.run("experiment", "kill", str(experiment_id), check=False)  # it runs, and may be over


def test_det_job_update_moves_a_waiting_experiment_to_a_pool_that_runs_it(
    det: Det, user: Det, cluster: Cluster, model: Path, tmp_path: Path,
) -> None:
    """`det job update --resource-pool`: an experiment waiting in `gpu` (no agent serves it)
    moves to `default`, runs and completes there, its trial's logs saying so; a pool that does
    not exist is refused naming resourcePool, and only the job's owner (or an admin) moves it."""
    experiment_id = create(user, model, config_file(tmp_path, workspace(user), POOL))
    job = f"experiment-{experiment_id}"

    def waiting_in(pool_name: str) -> list[str]:
        return [j["jobId"] for j in cluster.get("/job-queues", resourcePool=pool_name)["jobs"]
                if j["summary"]["state"] == "STATE_QUEUED"]

    wait_for(lambda: job in waiting_in(POOL), timeout=60, what=f"{job} to wait in {POOL}")
    refused(user.run("job", "update", job, "--resource-pool", "no-such-pool", check=False),
            "resourcePool", "no-such-pool")
    admins = create(det, model, config_file(tmp_path, workspace(det), POOL))
    refused(user.run("job", "update", f"experiment-{admins}", "--resource-pool", "default",
                     check=False), "Forbidden", "may not change")
    det.run("experiment", "kill", str(admins))

    user.run("job", "update", job, "--resource-pool", "default")
    assert cluster.experiment(experiment_id)["resourcePool"] == "default"
    wait_for(lambda: cluster.experiment(experiment_id)["state"] == "STATE_COMPLETED",
             timeout=90, what=f"experiment {experiment_id} to complete in the default pool")
    assert job not in waiting_in(POOL)
    [trial] = cluster.trials(experiment_id)
    logs = user.run("trial", "logs", str(trial["id"])).stdout
    assert f"moved from resource pool '{POOL}' to 'default'" in logs, logs


def _slots(det: Det) -> dict[str, dict[str, object]]:
    listed = json.loads(det.run("slot", "list", "--json").stdout)
    return {str(s["slot_id"]): s for s in listed if s["agent_id"] == AGENT_ID}


def test_slot_disable_and_enable_show_in_det_slot_list_across_a_master_restart(
    det: Det, user: Det, cluster: Cluster,
) -> None:
    assert det.run("slot", "disable", AGENT_ID, "1").stdout.strip() == (
        f"Disabled slot 1 of agent {AGENT_ID}")
    slots = _slots(det)
    assert (slots["0"]["enabled"], slots["1"]["enabled"]) == (True, False)
    rows = {r[2]: r for r in det.rows("slot", "list") if r[0] == AGENT_ID}
    assert (rows["0"][3], rows["1"][3]) == ("True", "False")
    assert "disabled by admin" in cluster.run("slot", "list").stdout
    refused(user.run("slot", "enable", AGENT_ID, "1", check=False), "admins")
    refused(det.run("slot", "disable", AGENT_ID, "7", check=False), "slot", "7")
    refused(det.run("slot", "disable", "no-such-agent", "0", check=False), "no-such-agent")

    pid = read_pid(cluster.state_dir / "run" / "master.pid")
    assert pid is not None
    psutil.Process(pid).kill()
    psutil.Process(pid).wait(10)
    cluster.run("cluster", "up")
    wait_for(lambda: cluster.get("/agents")["agents"], timeout=60, what="the agent")
    assert _slots(det)["1"]["enabled"] is False  # kept by the database

    assert det.run("slot", "enable", AGENT_ID, "1").stdout.strip() == (
        f"Enabled slot 1 of agent {AGENT_ID}")
    assert all(s["enabled"] for s in _slots(det).values())
