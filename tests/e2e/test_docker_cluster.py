"""End to end with the Docker runtime: `epochal cluster up --runtime docker`, trials in task
containers from the task image (built once per session, cached by hash).

Same set-up as test_local_cluster.py: the session's PostgreSQL (a fresh database) and Temporal
dev server (the e2e namespace), the CLI in subprocesses.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import docker.errors
import pytest
import yaml

from agent_worker.docker_engine import agent_containers
from common.processes import read_pid
from deploy.local_cluster import AGENT_ID
from tests.e2e.cluster import (
    DIGITS,
    FAST_AGENT_TIMEOUT,
    Cluster,
    created_id,
    docker_runtime_cluster,
    script_experiment,
)
from tests.e2e.test_faults import wait_done
from tests.e2e.test_local_cluster import long_single_config, trial_of
from tests.s3_fixtures import S3Server
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def docker_cluster(postgres_url: str, temporal_address: str,
                   task_image: str) -> Iterator[Cluster]:
    with docker_runtime_cluster(postgres_url, temporal_address, "e2e-docker", 2,
                                env_extra=FAST_AGENT_TIMEOUT) as cluster:
        yield cluster


def test_grid_search_runs_in_containers(docker_cluster: Cluster,
                                        docker_client: docker.DockerClient) -> None:
    result = docker_cluster.run(
        "experiment", "create", "examples/digits/grid.yaml", "examples/digits", "--follow",
        timeout=600)
    experiment_id = created_id(result.stdout)
    assert "Best trial:" in result.stdout
    trials = docker_cluster.json("experiment", "describe", str(experiment_id))["trials"]
    assert len(trials) == 6
    assert {t["state"] for t in trials} == {"STATE_COMPLETED"}
    assert all(t["bestValidation"]["metrics"]["avgMetrics"]["accuracy"] > 0 for t in trials)
    checkpoints = docker_cluster.json("checkpoint", "list", str(experiment_id))["checkpoints"]
    assert all(Path(c["storagePath"]).is_dir() for c in checkpoints
               if c["state"] == "STATE_COMPLETED")
    assert agent_containers(docker_client, AGENT_ID, docker_cluster.url) == []


# What a trial on the host's network would need to read the loopback's traffic (the cluster
# token, an admin's session, other trials' tokens): root, capabilities (NET_RAW) and set-uid
# programs to get them back. It reports what it has, then checkpoints as any trial does.
# A trial's probe of an address (host:port): "connected", or the error's name.
CONNECTED = """
import socket

def connected(address):
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        return "connected"
    except OSError as err:
        return type(err).__name__
"""

PRIVILEGES_PY = CONNECTED + """
import json, os
import harness.core

def status(field):
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith(field + ":"))

def opened(*args):
    try:
        socket.socket(*args).close()
        return "opened"
    except OSError as err:
        return type(err).__name__

def written(directory):
    try:
        with open(os.path.join(directory, "written.txt"), "w") as f:
            f.write("x")
        return True
    except OSError as err:
        return type(err).__name__

found = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
         **{field: status(field) for field in ("CapEff", "CapPrm", "CapBnd", "NoNewPrivs")},
         "packet": opened(socket.AF_PACKET, socket.SOCK_RAW),
         "raw_tcp": opened(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP),
         "home": written(os.environ["HOME"]), "workdir": written(os.getcwd()),
         "temporal": connected(os.environ["TEMPORAL"]), "master": connected(os.environ["MASTER"]),
         "determined_info": bool(json.load(open("/run/determined/info/trial.json")))}
print("FOUND " + json.dumps(found), flush=True)
with harness.core.init() as core:
    core.train.report_validation_metrics(1, {"loss": 0.5})
    with core.checkpoint.store_path({"steps_completed": 1}) as (path, _):
        (path / "found.json").write_text(json.dumps(found))
"""


def test_a_trial_runs_unprivileged_and_cannot_sniff_the_hosts_network(
        docker_cluster: Cluster, tmp_path: Path) -> None:
    """Host networking stays (distributed training needs it); what keeps a trial from reading
    others' traffic is that it runs as an unprivileged user with no capability at all and
    `no_new_privs`, so no raw or packet socket."""
    experiment_id = _privileges_experiment(docker_cluster, tmp_path)
    trial = trial_of(docker_cluster, experiment_id)
    logs = docker_cluster.run("trial", "logs", str(trial["id"])).stdout
    assert trial["state"] == "STATE_COMPLETED", logs
    [line] = [line for line in logs.splitlines() if "FOUND " in line]
    found = json.loads(line.split("FOUND ", 1)[1])
    assert found["uid"] != 0 and found["gid"] != 0 and 0 not in found["groups"], found
    assert found["CapEff"] == found["CapPrm"] == found["CapBnd"] == "0" * 16, found
    assert found["NoNewPrivs"] == "1", found
    assert found["packet"] == found["raw_tcp"] == "PermissionError", found
    # The agent's firewall matches the containers' uid as the sandbox's: Temporal is closed.
    assert (found["temporal"], found["master"]) == ("ConnectionRefusedError", "connected"), found
    assert found["home"] is True and found["workdir"] is True, found
    assert found["determined_info"] is True, found
    [checkpoint] = [c for c in docker_cluster.json("checkpoint", "list",
                                                   str(experiment_id))["checkpoints"]
                    if c["state"] == "STATE_COMPLETED"]
    stored = Path(checkpoint["storagePath"])
    assert json.loads((stored / "found.json").read_text()) == found
    assert stored.stat().st_uid == found["uid"]  # the trial's files are its user's


# Another user's trial, in its container, at a checkpoint of the first user's.
INTRUDER_PY = """
import json, os
target = os.environ["TARGET"]

def attempt(action):
    try:
        action()
        return "done"
    except OSError as err:
        return type(err).__name__

found = {"uid": os.getuid(),
         "read": attempt(lambda: open(os.path.join(target, "found.json")).read()),
         "write": attempt(lambda: open(os.path.join(target, "sitecustomize.py"), "w").close()),
         "rename": attempt(lambda: os.rename(target, target + "-gone"))}
print("INTRUDER " + json.dumps(found), flush=True)
"""


def test_another_users_container_reads_and_writes_nothing_of_a_users_checkpoints(
        docker_cluster: Cluster, tmp_path: Path) -> None:
    """Each user's containers run as that user's own identity and write files private to it:
    another user's container, with the same storage mounted, cannot read, change or move them."""
    victim = _privileges_experiment(docker_cluster, tmp_path)
    [checkpoint] = [c for c in docker_cluster.json("checkpoint", "list", str(victim))[
        "checkpoints"] if c["state"] == "STATE_COMPLETED"]
    stored = Path(checkpoint["storagePath"])
    intruder = docker_cluster.ordinary_user(tmp_path)
    experiment_id = script_experiment(docker_cluster, tmp_path, "intruder", INTRUDER_PY,
                                      {"TARGET": str(stored)}, max_length={"batches": 1},
                                      env_extra=intruder)
    wait_done(docker_cluster, experiment_id)
    logs = docker_cluster.run("trial", "logs", str(trial_of(docker_cluster, experiment_id)["id"]),
                              env_extra=intruder).stdout
    [line] = [line for line in logs.splitlines() if "INTRUDER " in line]
    found = json.loads(line.split("INTRUDER ", 1)[1])
    assert found["uid"] != stored.stat().st_uid, found
    assert (found["read"], found["write"], found["rename"]) == (
        "PermissionError", "PermissionError", "PermissionError"), found
    assert json.loads((stored / "found.json").read_text())  # still there, whole


# A user's server in its container (on the host's network, its temporary files beside it), and
# another user's container at it.
LISTENER_PY = """
import json, socket, time
for directory in ("/tmp", "/var/tmp", "/dev/shm"):
    with open(directory + "/server-secret", "w") as f:
        f.write("mine")
server = socket.create_server(("0.0.0.0", 0))
print("LISTENING " + json.dumps({"port": server.getsockname()[1]}), flush=True)
time.sleep(600)
"""

PROBE_PY = CONNECTED + """
import json, os

found = {name: connected(os.environ[name]) for name in ("SERVER", "TEMPORAL", "MASTER")}
found["seen"] = [d for d in ("/tmp", "/var/tmp", "/dev/shm") if "server-secret" in os.listdir(d)]
print("PROBED " + json.dumps(found), flush=True)
"""


def test_another_users_container_cannot_reach_a_users_server(
        docker_cluster: Cluster, tmp_path: Path) -> None:
    """A port a user's container opens itself (not one it was given) answers that user's runs
    only, once the agent's scan of the host's listening sockets sees it; its /tmp, /var/tmp
    and /dev/shm are its own."""
    owner = docker_cluster.ordinary_user(tmp_path)  # two ordinary users
    server = script_experiment(docker_cluster, tmp_path, "server", LISTENER_PY, env_extra=owner)
    try:
        port = wait_for(lambda: docker_cluster.printed(server, "LISTENING "), 120,
                        "the server's port")["port"]
        intruder = docker_cluster.ordinary_user(tmp_path)
        probe = script_experiment(docker_cluster, tmp_path, "probe", PROBE_PY, {
            "SERVER": f"127.0.0.1:{port}", "TEMPORAL": docker_cluster.temporal_address,
            "MASTER": docker_cluster.url.removeprefix("http://")}, env_extra=intruder)
        wait_done(docker_cluster, probe)
        found = wait_for(lambda: docker_cluster.printed(probe, "PROBED "), 30,
                         "the probe's findings")
        assert found == {"SERVER": "ConnectionRefusedError", "TEMPORAL": "ConnectionRefusedError",
                         "MASTER": "connected", "seen": []}, found
        socket.create_connection(("127.0.0.1", port), timeout=10).close()  # the agent can
    finally:
        docker_cluster.run("experiment", "kill", str(server), check=False, env_extra=owner)
    wait_done(docker_cluster, server)


def _privileges_experiment(cluster: Cluster, tmp_path: Path) -> int:
    """An ended run of PRIVILEGES_PY (it reports what it found and checkpoints it)."""
    experiment_id = script_experiment(
        cluster, tmp_path, "privileges", PRIVILEGES_PY,
        {"TEMPORAL": cluster.temporal_address, "MASTER": cluster.url.removeprefix("http://")},
        max_length={"batches": 1})
    wait_done(cluster, experiment_id)
    return experiment_id


def test_s3_checkpoints_from_a_container(docker_cluster: Cluster, s3_server: S3Server,
                                         tmp_path: Path) -> None:
    """A container reaches S3 through the master's presigned URLs: no storage is mounted, only
    the trial's checkpoint cache."""
    bucket = s3_server.bucket()
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["checkpoint_storage"] = s3_server.storage(bucket)
    path = tmp_path / "s3.yaml"
    path.write_text(yaml.safe_dump(config))
    result = docker_cluster.run("experiment", "create", str(path), str(DIGITS), "--follow",
                                timeout=300)
    experiment_id = created_id(result.stdout)
    [trial] = docker_cluster.json("experiment", "describe", str(experiment_id))["trials"]
    logs = docker_cluster.run("trial", "logs", str(trial["id"])).stdout
    assert trial["state"] == "STATE_COMPLETED", f"{result.stdout}\n{logs}"

    def kept_in_bucket() -> bool:
        checkpoints = docker_cluster.json("checkpoint", "list", str(experiment_id))["checkpoints"]
        assert all(c["storagePath"].startswith(f"s3://{bucket}/") for c in checkpoints)
        kept = [c for c in checkpoints if c["state"] == "STATE_COMPLETED"]
        return bool(kept) and s3_server.objects(bucket) == {
            f"{c['uuid']}/{name}": size for c in kept for name, size in c["resources"].items()}

    wait_for(kept_in_bucket, timeout=90, what="the bucket to hold exactly the kept checkpoints")
    assert not any((docker_cluster.state_dir / "checkpoints").glob(
        f"{trial['latestCheckpointUuid']}*"))
    cache = docker_cluster.state_dir / "agent" / "trials" / str(trial["id"]) / "checkpoint-cache"
    cached = sorted(p.name for p in cache.iterdir()) if cache.is_dir() else None
    assert trial["latestCheckpointUuid"] in (cached or []), f"cache {cache}: {cached}\n{logs}"


def test_killed_agent_leaves_no_container_after_restart(
        docker_cluster: Cluster, docker_client: docker.DockerClient, tmp_path: Path) -> None:
    result = docker_cluster.run(
        "experiment", "create", str(long_single_config(tmp_path)), "examples/digits")
    experiment_id = created_id(result.stdout)
    wait_for(lambda: trial_of(docker_cluster, experiment_id).get("totalBatchesProcessed", 0) > 0,
             timeout=120, what="the first training metrics")
    (orphan,) = agent_containers(docker_client, AGENT_ID, docker_cluster.url)
    pid = read_pid(docker_cluster.state_dir / "run" / "agent.pid")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    def orphan_over() -> bool:
        orphan.reload()
        return orphan.status != "running"

    # The engine would keep it; the run's own watcher ends it with its agent (the agent-alive
    # FIFO), so nothing goes on writing into a trial that no agent watches.
    wait_for(orphan_over, timeout=15, what="the killed agent's container to end by itself")

    docker_cluster.run("cluster", "up")  # starts the agent again; it removes the orphan

    def orphan_gone() -> bool:
        try:
            orphan.reload()
        except docker.errors.NotFound:
            return True
        return False

    wait_for(orphan_gone, timeout=30, what="the orphaned container to be removed")
    docker_cluster.run("experiment", "kill", str(experiment_id))
    wait_for(lambda: trial_of(docker_cluster, experiment_id)["state"] in (
        "STATE_CANCELED", "STATE_ERROR", "STATE_COMPLETED"), timeout=120,
        what="the killed trial to end")
    wait_for(lambda: agent_containers(docker_client, AGENT_ID, docker_cluster.url) == [],
             timeout=30,
             what="no container left")


def test_bad_image_fails_fast_with_a_clear_message(docker_cluster: Cluster,
                                                   tmp_path: Path) -> None:
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["name"] = "digits-bad-image"
    config["environment"] = {"image": "epochal-test/no-such-image:404"}
    config["max_restarts"] = 0
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    started = time.monotonic()
    experiment_id = created_id(docker_cluster.run(
        "experiment", "create", str(path), "examples/digits").stdout)
    wait_for(lambda: trial_of(docker_cluster, experiment_id).get("state") == "STATE_ERROR",
             timeout=60, what="the trial to fail")
    assert time.monotonic() - started < 30
    logs = docker_cluster.run("trial", "logs", str(trial_of(docker_cluster, experiment_id)["id"]))
    assert "'epochal-test/no-such-image:404'" in logs.stdout
    assert "cannot be pulled" in logs.stdout


def test_interactive_tasks_run_in_containers(docker_cluster: Cluster,
                                             docker_client: docker.DockerClient,
                                             tmp_path: Path) -> None:
    """A command with its context files (its `startup-hook.sh` sourced first, in the
    container's shell, as on Determined), and a shell (the task image's SSH server, reached
    through the master's proxy), each in a task container that goes when the task ends."""
    (tmp_path / "data.txt").write_text("from the context\n")
    (tmp_path / "startup-hook.sh").write_text(
        'export FROM_HOOK="exported by the hook"\necho "written by the hook" > hooked.txt\n')
    done = docker_cluster.run("cmd", "run", "--context", str(tmp_path),
                              'cat data.txt hooked.txt && echo "$FROM_HOOK" && '
                              "test -f /.dockerenv && echo in a container", timeout=300)
    lines = [line for line in done.stdout.splitlines() if not line.startswith("[epochal]")]
    assert lines == ["from the context", "written by the hook", "exported by the hook",
                     "in a container"], done.stdout + done.stderr
    shell = docker_cluster.run("shell", "start", "--", "echo", "a $DET_TASK_TYPE in",
                               "$(test -f /.dockerenv && echo a container)", timeout=300)
    assert "a SHELL in a container" in shell.stdout, shell.stdout + shell.stderr
    reopen = re.search(r"epochal shell open (\S+)", shell.stderr)
    assert reopen, shell.stderr
    docker_cluster.run("shell", "kill", reopen.group(1))
    wait_for(lambda: agent_containers(docker_client, AGENT_ID, docker_cluster.url) == [],
             timeout=60,
             what="the tasks' containers to go")
