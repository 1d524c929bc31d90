"""A cluster whose checkpoints live in S3 (`epochal cluster up --s3`: a local SeaweedFS as the
default storage), with two agents that share no checkpoint directory: a paused trial resumes on
the other agent from the checkpoint it downloads, and the experiment's end leaves exactly the
checkpoints it keeps in the bucket.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from minio import Minio

from deploy.local_cluster import S3_BUCKET
from deploy.processes import free_port_block
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
        wait_for(lambda: state(cluster, experiment_id) == "STATE_PAUSED", timeout=60,
                 what="the experiment to pause")
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
