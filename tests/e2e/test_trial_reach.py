"""What a trial reaches of the local cluster it runs on: the master's API and the S3 endpoint,
and no other port of the cluster's servers. Temporal's dev server (frontend, HTTP API, UI,
metrics and its internal services), PostgreSQL and SeaweedFS's master, volume server and filer
are closed to the task user by the agent's firewall (agent_worker/trial_firewall.py), in both
runtimes.

The cluster runs its own PostgreSQL, Temporal and S3 server (on free ports, in its own state
directory), whose ports the test finds from the servers' processes, not from the cluster's
settings, so a port the cluster does not know of is tried too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from agent_worker.sandbox import RUN_ID_BASE
from common.processes import free_port, free_port_block, read_pid
from deploy.s3_server import PORT_BLOCK, ports
from tests.e2e.cluster import Cluster, script_experiment
from tests.e2e.test_faults import wait_done

pytestmark = pytest.mark.slow

HOST = "127.0.0.1"
REACHABLE = ("master API", "S3 endpoint")

# The trial: a TCP connection to each address it is given (name -> host:port), as the task user.
REACH_PY = """
import json, os, socket
reached = {"uid": os.getuid()}
for name, address in json.loads(os.environ["CLUSTER_PORTS"]).items():
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
        reached[name] = "connected"
    except OSError as err:
        reached[name] = type(err).__name__
print("REACHED " + json.dumps(reached), flush=True)
"""


@pytest.fixture(scope="module", params=["process", "docker"])
def runtime(request: pytest.FixtureRequest) -> str:
    """The agent's runtime: the firewall holds a sandboxed process and a task container alike
    (the container on the host's network, as its user's identity)."""
    if request.param == "docker":
        request.getfixturevalue("task_image")  # skips where there is no Docker engine
    return str(request.param)


@pytest.fixture(scope="module")
def given(runtime: str) -> dict[str, int]:
    """The ports `cluster up` is given (new ones for each runtime's cluster)."""
    return {"api": free_port(), "temporal": free_port(), "temporal-ui": free_port(),
            "postgres": free_port(), "s3": free_port_block(PORT_BLOCK)}


@pytest.fixture(scope="module")
def cluster(given: dict[str, int], runtime: str) -> Iterator[Cluster]:
    state_dir = Path(tempfile.mkdtemp(prefix="epochal-reach-"))
    state_dir.chmod(0o755)
    url = f"http://{HOST}:{given['api']}"
    env = {key: value for key, value in os.environ.items()
           if key not in ("EPOCHAL_DB_URL", "EPOCHAL_TEMPORAL_ADDRESS",
                          "EPOCHAL_TEMPORAL_NAMESPACE")}
    env.update(EPOCHAL_STATE_DIR=str(state_dir), EPOCHAL_MASTER=url,
               EPOCHAL_KILL_GRACE_SECONDS="3", EPOCHAL_AUTH_FILE=str(state_dir / "auth.json"))
    cluster = Cluster(env, url, state_dir, f"{HOST}:{given['temporal']}", "default")
    try:
        cluster.up = cluster.run(
            "cluster", "up", "--s3", "--slots", "1", "--runtime", runtime,
            *(arg for name, port in given.items() for arg in (f"--{name}-port", str(port))),
            timeout=300)
        assert f"{runtime} runtime" in cluster.up.stderr, cluster.up.stderr
        yield cluster
    finally:
        cluster.run("cluster", "down", check=False)  # and the rules of an agent a test killed
        shutil.rmtree(state_dir, ignore_errors=True)


def listening_ports(cluster: Cluster, part: str) -> set[int]:
    pid = read_pid(cluster.state_dir / "run" / f"{part}.pid")
    assert pid is not None, f"{part} does not run"
    return {c.laddr.port for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


def temporal_role(port: int, frontend: int, ui: int) -> str:
    """What a port of the dev server is, asked as the test's user (no firewall)."""
    if port in (frontend, ui):
        return "frontend" if port == frontend else "UI"
    try:
        answer = httpx.get(f"http://{HOST}:{port}/api/v1/namespaces", timeout=10)
        if answer.status_code == 200 and "namespaces" in answer.json():
            return "HTTP API"
        if httpx.get(f"http://{HOST}:{port}/metrics", timeout=10).text.startswith("# HELP"):
            return "metrics"
    except (httpx.HTTPError, ValueError):
        pass
    return f"gRPC {port}"  # the history, matching and worker services'


def cluster_ports(cluster: Cluster, given: dict[str, int]) -> dict[str, str]:
    """Every port the cluster's servers listen on, by name, as host:port."""
    found = {"master API": given["api"], "S3 endpoint": given["s3"]}
    for port in listening_ports(cluster, "postgres"):
        found["PostgreSQL" if port == given["postgres"] else f"PostgreSQL {port}"] = port
    seaweedfs = {port: name for name, port in ports(given["s3"]).items()}
    for port in listening_ports(cluster, "s3") - {given["s3"]}:
        found[f"SeaweedFS {seaweedfs.get(port, port)}"] = port
    for port in listening_ports(cluster, "temporal"):
        found[f"Temporal {temporal_role(port, given['temporal'], given['temporal-ui'])}"] = port
    return {name: f"{HOST}:{port}" for name, port in found.items()}


def test_a_trial_reaches_the_api_and_the_s3_endpoint_and_no_other_port_of_the_cluster(
    cluster: Cluster, given: dict[str, int], tmp_path: Path
) -> None:
    ports_by_name = cluster_ports(cluster, given)
    expected_names = {"Temporal frontend", "Temporal HTTP API", "Temporal UI",
                      "Temporal metrics", "PostgreSQL", "SeaweedFS master.port",
                      "SeaweedFS volume.port", "SeaweedFS filer.port", *REACHABLE}
    assert expected_names <= set(ports_by_name), ports_by_name
    experiment_id = script_experiment(cluster, tmp_path, "reach", REACH_PY,
                                      {"CLUSTER_PORTS": json.dumps(ports_by_name)})
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"

    [trial] = cluster.trials(experiment_id)
    [line] = [line["log"] for line in cluster.trial_logs(trial["id"]) if "REACHED " in line["log"]]
    reached = json.loads(line.split("REACHED ", 1)[1])
    assert reached.pop("uid") >= RUN_ID_BASE  # its user's own identity (agent_worker/sandbox.py)
    assert reached == {name: "connected" if name in REACHABLE else "ConnectionRefusedError"
                       for name in ports_by_name}
