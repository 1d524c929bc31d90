"""A cluster whose checkpoints live in S3 (`epochal cluster up --s3`: a local SeaweedFS as the
default storage), with two agents that share no checkpoint directory: a paused trial resumes on
the other agent from the checkpoint it downloads, and the experiment's end leaves exactly the
checkpoints it keeps in the bucket.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from minio import Minio
from temporalio.client import Client

from common.processes import free_port_block
from deploy.local_cluster import S3_BUCKET
from deploy.s3_server import PORT_BLOCK
from tests.e2e.cluster import Cluster, SecondAgent, shared_servers_cluster
from tests.e2e.test_faults import create, slow_config, state, trials, wait_done
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str) -> Iterator[Cluster]:
    port = free_port_block(PORT_BLOCK)
    with shared_servers_cluster(postgres_url, temporal_address, "s3", "--slots", "1", "--s3",
                                "--s3-port", str(port)) as c:
        c.s3_port = port  # type: ignore[attr-defined]
        agent = SecondAgent(c)
        agent.start()
        try:
            yield c
        finally:
            agent.kill()


def bucket_objects(cluster: Cluster) -> dict[str, int]:
    secrets = cluster.secrets
    client = Minio(f"127.0.0.1:{cluster.s3_port}", access_key=secrets["s3_access_key"],  # type: ignore[attr-defined]
                   secret_key=secrets["s3_secret_key"], secure=False)
    return {str(o.object_name): int(o.size or 0)
            for o in client.list_objects(S3_BUCKET, recursive=True)}


def test_a_paused_trial_resumes_on_another_agent_from_its_s3_checkpoint(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert "s3://checkpoints at http://127.0.0.1:" in cluster.up.stdout  # type: ignore[union-attr]
    cluster.run("agent", "disable", "agent-2")  # the first run goes to local-agent
    try:
        experiment_id = create(cluster, slow_config(tmp_path, "s3-pause", steps=30, sleep=0.1))
        wait_for(lambda: trials(cluster, experiment_id)[0]["latestCheckpointUuid"],
                 timeout=90, what="a checkpoint")
        cluster.run("experiment", "pause", str(experiment_id))
        # The trial is PAUSED once its run stopped: the experiment is before, and the run may
        # checkpoint meanwhile.
        wait_for(lambda: state(cluster, experiment_id) == "STATE_PAUSED"
                 and trials(cluster, experiment_id)[0]["state"] == "STATE_PAUSED", timeout=60,
                 what="the experiment and its trial to pause")
        paused_at = trials(cluster, experiment_id)[0]["latestCheckpointUuid"]
        cluster.run("agent", "disable", "local-agent")
        cluster.run("agent", "enable", "agent-2")
        cluster.run("experiment", "activate", str(experiment_id))
        assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    finally:
        cluster.run("agent", "enable", "local-agent")
        cluster.run("agent", "enable", "agent-2")

    trial = trials(cluster, experiment_id)[0]
    assert trial["agentId"] == "agent-2"
    logs = cluster.run("trial", "logs", str(trial["id"])).stdout
    assert f"resumed from checkpoint {paused_at}" in logs
    # agent-2 shares nothing with local-agent: it resumed from the checkpoint it downloaded;
    # its cache holds what it stored since (the newest two).
    cache = cluster.state_dir / "agent-2" / "trials" / str(trial["id"]) / "checkpoint-cache"
    assert (cache / trial["latestCheckpointUuid"] / "state.json").is_file()
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) <= 2

    # The experiment kept its latest and best checkpoints (one here); the bucket holds exactly
    # their files.
    kept = [c for c in cluster.json("checkpoint", "list", str(experiment_id))["checkpoints"]
            if c["state"] == "STATE_COMPLETED"]
    assert kept and len(kept) < 6
    expected = {f"{c['uuid']}/{name}": size for c in kept for name, size in c["resources"].items()}
    wait_for(lambda: bucket_objects(cluster) == expected, timeout=30,
             what="the bucket to hold exactly the kept checkpoints")

    # And anyone with the CLI downloads one through the master.
    out = cluster.run("checkpoint", "download", kept[0]["uuid"], str(tmp_path / "dl")).stdout
    assert "Downloaded checkpoint" in out
    assert (tmp_path / "dl" / "state.json").read_text() == '{"step": 30}'


def test_no_secret_of_a_config_is_in_any_temporal_history(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A user's S3 keys and a credential variable reach the run, and no workflow history of
    the experiment holds them in clear (common/payload_codec.py): Temporal's HTTP API and UI
    authenticate nobody."""
    secrets = cluster.secrets
    variable = f"wandb-{uuid.uuid4().hex}"
    path = slow_config(tmp_path, "secrets", steps=5, sleep=0.01)
    config = yaml.safe_load(path.read_text())
    config["checkpoint_storage"] = {
        "type": "s3", "bucket": S3_BUCKET, "prefix": "user-keys",
        "endpoint_url": f"http://127.0.0.1:{cluster.s3_port}",  # type: ignore[attr-defined]
        "access_key": secrets["s3_access_key"], "secret_key": secrets["s3_secret_key"]}
    config["environment"] = {"environment_variables": [f"WANDB_API_KEY={variable}"]}
    path.write_text(yaml.safe_dump(config))
    experiment_id = create(cluster, path)
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    assert trials(cluster, experiment_id)[0]["latestCheckpointUuid"]  # the keys worked

    async def histories() -> list[bytes]:
        client = await Client.connect(cluster.temporal_address,
                                      namespace=cluster.temporal_namespace)
        found = []
        query = f"WorkflowId STARTS_WITH 'experiment-{experiment_id}'"
        async for execution in client.list_workflows(query):
            history = await client.get_workflow_handle(
                execution.id, run_id=execution.run_id).fetch_history()
            # Raw protobuf: a payload's bytes as they are (its JSON would show them base64).
            found.append(b"".join(e.SerializeToString() for e in history.events))
        return found

    found = asyncio.run(histories())
    assert len(found) >= 2  # the experiment's and its trial's
    for secret in (secrets["s3_secret_key"], variable):
        assert not [h for h in found if secret.encode() in h], f"{secret[:6]}... in a history"
