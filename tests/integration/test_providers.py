"""The provisioner's providers and their config: real agent processes (`process`), real
containers on the suite's Docker engine (`docker`), and EC2 through boto3 against moto's
in-process fake of the EC2 API (`aws`: no cloud here, so a fake, as said)."""

from __future__ import annotations

import base64
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from providers import AgentSetup
from providers.aws import Ec2Agents
from providers.config import (
    AwsProvider,
    DockerProvider,
    MasterConfigError,
    ProcessProvider,
    load_master_config,
    parse_duration,
)
from providers.docker import AGENT_LABEL, DockerAgents
from providers.process import ProcessAgents, pid_files

SETUP = AgentSetup(pool="gpu", master_url="http://10.0.0.5:8080", temporal_address="10.0.0.5:7233",
                   namespace="default", cluster_token="the-cluster-token", slots=2)


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "master.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_determined_master_yaml_pools_and_durations(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "port": 8080, "db": {"host": "db"},  # the rest of a Determined master.yaml
        "resource_pools": [
            {"pool_name": "default"},
            {"pool_name": "gpu", "description": "V100s", "provider": {
                "type": "aws", "region": "us-west-2", "image_id": "ami-123",
                "instance_type": "p3.8xlarge", "max_instances": 8, "min_instances": 1,
                "max_idle_agent_period": "10m", "max_agent_starting_period": "1h30m",
                "network_interface": {"subnet_id": "subnet-1", "public_ip": False}}}]})
    providers = load_master_config(path)
    assert list(providers) == ["gpu"]
    gpu = providers["gpu"]
    assert isinstance(gpu, AwsProvider)
    limits = gpu.limits()
    assert (limits.min_instances, limits.max_instances) == (1, 8)
    assert (limits.max_idle_agent_period, limits.max_agent_starting_period) == (600, 5400)
    assert [parse_duration(v) for v in ("45s", "1.5m", 30, "250ms")] == [45, 90, 30, 0.25]


@pytest.mark.parametrize(("provider", "expected"), [
    ({"type": "gcp"}, "resource_pools.0.provider: type must be one of process, docker, aws"),
    ({"type": "process", "max_idle_agent_period": "soon"},
     "resource_pools.0.provider.process.max_idle_agent_period: Value error, expected a "
     "duration such as 30s, 20m or 1h30m, got 'soon'"),
    ({"type": "process", "max_instances": -1}, "max_instances: Input should be greater than"),
    ({"type": "process", "min_instances": 4, "max_instances": 2},
     "resource_pools.p.provider: min_instances (4) is more than max_instances (2)"),
    ({"type": "aws", "image_id": "ami-1"}, "resource_pools.0.provider.aws.region: Field required"),
])
def test_a_wrong_provider_is_named_with_what_was_expected(
    tmp_path: Path, provider: dict[str, object], expected: str
) -> None:
    path = write(tmp_path, {"resource_pools": [{"pool_name": "p", "provider": provider}]})
    with pytest.raises(MasterConfigError) as caught:
        load_master_config(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in str(caught.value)


def test_an_unreadable_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(MasterConfigError, match="EPOCHAL_MASTER_CONFIG: cannot read .*nope"):
        load_master_config(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("resource_pools: [")
    with pytest.raises(MasterConfigError, match="not valid YAML"):
        load_master_config(tmp_path / "bad.yaml")


# -- process ----------------------------------------------------------------------------------


@pytest.fixture
def process_agents(tmp_path: Path) -> Iterator[ProcessAgents]:
    # No master answers at 127.0.0.1:9: the agents keep trying to register, as a new
    # machine whose master is not up yet does.
    setup = AgentSetup(pool="cpu", master_url="http://127.0.0.1:9",
                       temporal_address="127.0.0.1:9", namespace="default",
                       cluster_token="the-cluster-token", slots=1)
    agents = ProcessAgents(ProcessProvider(type="process"), setup, python=sys.executable,
                           state_dir=str(tmp_path))
    yield agents
    agents.terminate([i.instance_id for i in agents.instances()])


def test_process_agents_start_list_and_stop(process_agents: ProcessAgents,
                                            tmp_path: Path) -> None:
    os.environ["EPOCHAL_DB_URL_PROBE"] = "postgresql://secret"  # the master's, not theirs
    try:
        launched = process_agents.launch(2)
    finally:
        del os.environ["EPOCHAL_DB_URL_PROBE"]
    assert [i.agent_id for i in process_agents.instances()] == sorted(
        i.agent_id for i in launched)
    assert all(i.agent_id.startswith("cpu-") and i.launched_at <= time.time() for i in launched)
    assert len(pid_files(tmp_path)) == 2
    pid = int((tmp_path / "provisioned" / "cpu" / launched[0].agent_id / "agent.pid").read_text())
    proc = psutil.Process(pid)
    cmd = proc.cmdline()
    assert cmd[cmd.index("--agent-id") + 1] == launched[0].agent_id
    assert cmd[cmd.index("--hide-from-trials") + 1] == str(tmp_path)
    env = proc.environ()
    assert env["EPOCHAL_CLUSTER_TOKEN"] == "the-cluster-token"
    assert "EPOCHAL_DB_URL_PROBE" not in env

    process_agents.terminate([launched[0].instance_id, "../escape"])
    assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    assert [i.agent_id for i in process_agents.instances()] == [launched[1].agent_id]
    # An agent that died on its own is no instance any more.
    other = int((tmp_path / "provisioned" / "cpu" / launched[1].agent_id / "agent.pid")
                .read_text())
    psutil.Process(other).kill()
    psutil.Process(other).wait(10)
    assert process_agents.instances() == []


# -- docker -----------------------------------------------------------------------------------


def test_docker_agents_are_labelled_containers(docker_client: object, task_image: str) -> None:
    import docker

    client: docker.DockerClient = docker_client  # type: ignore[assignment]
    # The task image has Python but no agent: its container starts, then exits.
    config = DockerProvider(type="docker", image=task_image, privileged=False,
                            agent_entrypoint=["python3", "-m", "agent_worker"])
    agents = DockerAgents(config, SETUP, client=client)
    launched: list[str] = []
    try:
        [instance] = agents.launch(1)
        launched.append(instance.instance_id)
        container = client.containers.get(instance.instance_id)
        assert container.labels[AGENT_LABEL] == instance.agent_id
        assert container.attrs["HostConfig"]["Privileged"] is False  # this engine allows none
        env = container.attrs["Config"]["Env"]
        assert "EPOCHAL_CLUSTER_TOKEN=the-cluster-token" in env
        args = container.attrs["Args"]
        assert args[args.index("--master") + 1] == "http://10.0.0.5:8080"
        assert args[args.index("--agent-id") + 1] == instance.agent_id
        # No agent in that image: the container exits, and is no instance any more.
        container.wait(timeout=60)
        assert agents.instances() == []
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(instance.instance_id)
    finally:
        agents.terminate(launched)


# -- aws (moto's in-process fake of EC2) ------------------------------------------------------


@pytest.fixture
def ec2() -> Iterator[object]:
    moto = pytest.importorskip("moto")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    with moto.mock_aws():
        import boto3

        yield boto3.client("ec2", region_name="us-west-2")


def test_ec2_agents_launch_tagged_instances_that_start_their_agent(ec2: object) -> None:
    client = ec2
    image = client.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]  # type: ignore[attr-defined]
    config = AwsProvider(type="aws", region="us-west-2", image_id=image,
                         instance_type="t3.micro", startup_script="echo booting")
    agents = Ec2Agents(config, SETUP, client=client)
    other = Ec2Agents(config, AgentSetup(**{**vars(SETUP), "pool": "cpu"}), client=client)
    launched = agents.launch(2)
    [stranger] = other.launch(1)
    assert sorted(i.instance_id for i in agents.instances()) == sorted(
        i.instance_id for i in launched)
    assert all(i.agent_id == i.instance_id for i in launched)

    data = client.describe_instance_attribute(  # type: ignore[attr-defined]
        InstanceId=launched[0].instance_id, Attribute="userData")["UserData"]["Value"]
    script = base64.b64decode(data).decode()
    assert script.startswith("#!/bin/bash\nset -euo pipefail\necho booting\n")
    assert "export EPOCHAL_CLUSTER_TOKEN=the-cluster-token" in script
    command = next(line for line in script.splitlines() if line.startswith("exec "))
    assert command.startswith("exec epochal agent run --master http://10.0.0.5:8080 ")
    for option in ("--temporal 10.0.0.5:7233", "--namespace default", "--pool gpu",
                   "--slots 2", "--agent-id \"$INSTANCE_ID\""):
        assert f" {option}" in command, option
    assert "--close-to-trials 169.254.169.254:80" in script
    reservation = client.describe_instances(  # type: ignore[attr-defined]
        InstanceIds=[launched[0].instance_id])["Reservations"][0]["Instances"][0]
    tags = {t["Key"]: t["Value"] for t in reservation["Tags"]}
    assert tags == {"epochal-pool": "gpu", "managed-by": "epochal", "Name": "epochal-agent"}

    agents.terminate([launched[0].instance_id, stranger.instance_id])  # not ours: left alone
    assert [i.instance_id for i in agents.instances()] == [launched[1].instance_id]
    assert [i.instance_id for i in other.instances()] == [stranger.instance_id]
