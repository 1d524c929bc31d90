"""`run_trial` with the Docker runtime against the real engine and the task image, in
temporalio's ActivityEnvironment, with a fake master serving the model definition and taking logs.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from agent_worker.container_spec import (
    CONTAINER_TRIAL_INFO,
    CONTAINER_WORKDIR,
    LABEL_AGENT,
    LABEL_MANAGED,
)
from agent_worker.docker_engine import agent_containers
from agent_worker.docker_runtime import DockerRuntime
from agent_worker.slots import SlotPool, cpu_slots
from agent_worker.trial_runs import AgentActivities
from tests.fakes.agent_master import FakeMaster, make_tgz
from wire.workflow_io import RunTrialInput

_experiment_ids = itertools.count(500)
_agents = itertools.count(1)

SEEN_PY = """
import json, os, sys
import harness.core, numpy, sklearn
print("INFO: inside", flush=True)
print("to stderr", file=sys.stderr, flush=True)
with open(os.environ["EPOCHAL_TRIAL_INFO"]) as f:
    info = json.load(f)
os.makedirs("../data")  # beside the working directory, as Determined's tutorials keep data
with open("../data/set.txt", "w") as f:
    f.write("the run's")
with open("/determined_shared_fs/from-determined.txt", "w") as f:  # where its code looks
    f.write("same storage")
# Into the checkpoint storage: the run's own directory is removed when it ends.
with open(os.path.join(info["checkpoint_storage"]["host_path"], "seen.json"), "w") as f:
    json.dump({"env": dict(os.environ), "cwd": os.getcwd(), "info": info,
               "python": sys.version_info[:2],
               "ckpt_dir": os.path.isdir(info["checkpoint_storage"]["host_path"]),
               "extra": open("/extra/hello.txt").read(),
               "data": open("../data/set.txt").read(), "home": os.path.expanduser("~")}, f)
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""

STUBBORN_PY = """
import signal, time
signal.signal(signal.SIGTERM, lambda *a: print("got SIGTERM, ignoring it", flush=True))
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


@pytest.fixture
def agent_id(docker_client: docker.DockerClient) -> Iterator[str]:
    agent = f"test-docker-{time.time_ns()}-{next(_agents)}"
    yield agent
    for c in agent_containers(docker_client, agent):
        c.remove(force=True)


def config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    extra_dir = tmp_path / "extra"
    extra_dir.mkdir(exist_ok=True)
    (extra_dir / "hello.txt").write_text("from the host")
    return {
        "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "ckpts")},
        "environment": {"environment_variables": {"MY_VAR": "hello"}},
        "bind_mounts": [{"host_path": str(extra_dir), "container_path": "/extra",
                         "read_only": True}],
        "resources": {"resource_pool": "default"},
        **extra,
    }


def activities(master: FakeMaster, http: httpx.AsyncClient, work_dir: Path, agent_id: str,
               client: docker.DockerClient, image: str, **kwargs: Any) -> AgentActivities:
    kwargs.setdefault("heartbeat_interval", 0.1)
    slots = cpu_slots(2)
    runtime = DockerRuntime(agent_id=agent_id, slots=slots, client=client,
                            default_image=image, **kwargs)
    return AgentActivities(agent_id=agent_id, master_url=master.url, work_dir=work_dir,
                           http=http, runtime=runtime, slots=SlotPool(slots),
                           cluster_id="test-cluster", log_flush_interval=0.05)


def trial_input(experiment_id: int, cfg: dict[str, Any]) -> RunTrialInput:
    return RunTrialInput(experiment_id=experiment_id, trial_id=7, run_id=1,
                         hparams={"lr": 0.1}, config=cfg, trial_seed=42,
                         latest_checkpoint=None, steps_completed=0)


async def test_trial_runs_in_a_container(master: FakeMaster, http: httpx.AsyncClient,
                                         tmp_path: Path, agent_id: str, task_image: str,
                                         docker_client: docker.DockerClient) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": SEEN_PY})
    acts = activities(master, http, tmp_path, agent_id, docker_client, task_image)
    env = ActivityEnvironment()
    heartbeats: list[Any] = []
    env.on_heartbeat = lambda *d: heartbeats.append(d)

    result = await env.run(acts.run_trial, trial_input(exp, config(tmp_path)))

    assert (result.exit_code, result.oom_killed) == (0, False), result
    assert heartbeats
    assert master.log_lines("stdout") == ["INFO: inside"]
    assert master.log_lines("stderr") == ["to stderr"]
    seen = json.loads((tmp_path / "ckpts" / "seen.json").read_text())
    assert not (tmp_path / "trials" / "7").exists()
    assert seen["cwd"] == CONTAINER_WORKDIR
    assert seen["env"]["EPOCHAL_TRIAL_INFO"] == CONTAINER_TRIAL_INFO
    assert seen["env"]["EPOCHAL_MASTER"] == master.url
    assert seen["env"]["MY_VAR"] == "hello"
    assert seen["info"]["trial_id"] == 7 and seen["info"]["agent_id"] == agent_id
    assert seen["python"] == [3, 11]
    assert seen["ckpt_dir"] is True  # the checkpoint storage, at the same path inside
    assert seen["extra"] == "from the host"  # the user's bind mount
    assert seen["data"] == "the run's" and seen["home"] == "/run/epochal"
    assert (tmp_path / "ckpts" / "from-determined.txt").read_text() == "same storage"
    assert agent_containers(docker_client, agent_id) == []  # removed after the run


async def test_exit_code_and_oom_are_reported(master: FakeMaster, http: httpx.AsyncClient,
                                              tmp_path: Path, agent_id: str, task_image: str,
                                              docker_client: docker.DockerClient) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({
        "train.py": SEEN_PY,
        "hog.py": "x = []\nwhile True:\n    x.append(bytearray(16 * 2**20))\n"})
    cfg = config(tmp_path)
    cfg["environment"]["environment_variables"]["EXIT_CODE"] = "3"
    acts = activities(master, http, tmp_path, agent_id, docker_client, task_image)
    result = await ActivityEnvironment().run(acts.run_trial, trial_input(exp, cfg))
    assert (result.exit_code, result.oom_killed) == (3, False)
    assert result.message == "exited with code 3"

    acts = activities(master, http, tmp_path, agent_id, docker_client, task_image,
                      memory_limit="64m")
    cfg = config(tmp_path, entrypoint="python3 hog.py")
    result = await ActivityEnvironment().run(acts.run_trial, trial_input(exp, cfg))
    assert result.oom_killed, result
    assert result.exit_code == 137
    assert "out of memory" in result.message


async def test_cancel_stops_and_removes_the_container(
        master: FakeMaster, http: httpx.AsyncClient, tmp_path: Path, agent_id: str,
        task_image: str, docker_client: docker.DockerClient) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": STUBBORN_PY})
    acts = activities(master, http, tmp_path, agent_id, docker_client, task_image,
                      kill_grace_seconds=1)
    env = ActivityEnvironment()
    task = asyncio.create_task(env.run(acts.run_trial, trial_input(exp, config(tmp_path))))
    while master.log_lines() != ["ready"]:
        await asyncio.sleep(0.05)
    (container,) = agent_containers(docker_client, agent_id)
    assert container.labels[LABEL_AGENT] == agent_id
    assert container.labels["ai.epochal.trial-id"] == "7"
    assert container.attrs["HostConfig"]["NetworkMode"] == "host"
    started = time.monotonic()
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 1 <= time.monotonic() - started < 10  # SIGTERM, the grace period, SIGKILL
    assert master.log_lines("stdout") == ["ready", "got SIGTERM, ignoring it"]
    assert agent_containers(docker_client, agent_id) == []
    assert acts.slots.in_use() == 0


async def test_startup_removes_what_a_crashed_agent_left(
        agent_id: str, task_image: str, docker_client: docker.DockerClient) -> None:
    labels = {LABEL_MANAGED: "true", LABEL_AGENT: agent_id}
    other = {LABEL_MANAGED: "true", LABEL_AGENT: f"{agent_id}-other"}
    left = [docker_client.containers.run(task_image, ["sleep", "600"], labels=labels,
                                         detach=True, network_mode="host"),
            docker_client.containers.create(task_image, ["true"], labels=labels)]
    keep = docker_client.containers.create(task_image, ["true"], labels=other)
    try:
        await DockerRuntime(agent_id=agent_id, client=docker_client,
                            default_image=task_image).startup()
        assert agent_containers(docker_client, agent_id) == []
        for c in left:
            with pytest.raises(docker.errors.NotFound):
                c.reload()
        keep.reload()  # another agent's container is left alone
    finally:
        keep.remove(force=True)


async def test_missing_image_fails_at_once(master: FakeMaster, http: httpx.AsyncClient,
                                           tmp_path: Path, agent_id: str, task_image: str,
                                           docker_client: docker.DockerClient) -> None:
    exp = next(_experiment_ids)
    master.model_defs[exp] = make_tgz({"train.py": SEEN_PY})
    acts = activities(master, http, tmp_path, agent_id, docker_client, task_image)
    cfg = config(tmp_path, environment={"image": "epochal-test/no-such-image:1"})
    started = time.monotonic()
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.run_trial, trial_input(exp, cfg))
    assert time.monotonic() - started < 30
    assert err.value.non_retryable and err.value.type == "ImageUnavailable"
    assert "'epochal-test/no-such-image:1'" in err.value.message
    assert "cannot be pulled" in err.value.message
    assert any("no-such-image" in line for line in master.log_lines("stderr"))

    # A local image is used as it is: never pulled unless asked.
    acts = activities(master, http, tmp_path, agent_id, docker_client, task_image,
                      pull_policy="never")
    result = await ActivityEnvironment().run(acts.run_trial, trial_input(exp, config(tmp_path)))
    assert result.exit_code == 0
    cfg = config(tmp_path, environment={"image": "epochal-test/no-such-image:1"})
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.run_trial, trial_input(exp, cfg))
    assert "does not pull images" in err.value.message
    # force_pull_image asks for a pull even of a local image; here there is no registry.
    acts = activities(master, http, tmp_path, agent_id, docker_client, task_image)
    cfg = config(tmp_path, environment={"image": task_image, "force_pull_image": True})
    with pytest.raises(ApplicationError) as err:
        await ActivityEnvironment().run(acts.run_trial, trial_input(exp, cfg))
    assert err.value.type == "ImageUnavailable" and task_image in err.value.message
