"""One trial on four slots of two agents, with real processes: the torch digits example trained
with DistributedDataParallel under Epochal's torchrun launcher (gloo on the CPU).

The cluster's own agent (`local-agent`) and `agent-2`, started here so a test can kill it, have
two slots each, so `slots_per_trial: 4` can only run as two parts, one per agent.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.cluster import (
    FAST_AGENT_TIMEOUT,
    REPO,
    Cluster,
    SecondAgent,
    created_id,
    shared_servers_cluster,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.slow
pytest.importorskip("torch", reason="make test installs torch (the `torch` extra)")

TORCH_DIGITS = REPO / "examples" / "torch_digits"
TERMINAL = {"STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"}


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str) -> Iterator[Cluster]:
    with shared_servers_cluster(postgres_url, temporal_address, "dist", "--slots", "2",
                                env_extra=FAST_AGENT_TIMEOUT) as c:
        agent = SecondAgent(c, slots=2)
        agent.start()
        c.second_agent = agent  # type: ignore[attr-defined]
        try:
            yield c
        finally:
            agent.kill()


def second_agent(cluster: Cluster) -> SecondAgent:
    agent: SecondAgent = cluster.second_agent  # type: ignore[attr-defined]
    if not agent.alive():
        agent.start()
    return agent


def config(tmp_path: Path, name: str, **hparams: Any) -> Path:
    """The example's distributed config, with `hparams` and `batches` changed."""
    data = yaml.safe_load((TORCH_DIGITS / "distributed.yaml").read_text())
    data["name"] = name
    batches = hparams.pop("batches", None)
    if batches is not None:
        data["searcher"]["max_length"] = {"batches": batches}
    data["hyperparameters"].update(hparams)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def create(cluster: Cluster, path: Path) -> int:
    return created_id(cluster.run("experiment", "create", str(path), str(TORCH_DIGITS)).stdout)


def wait_done(cluster: Cluster, experiment_id: int, timeout: float = 240) -> str:
    return str(wait_for(
        lambda: (s := cluster.experiment(experiment_id)["state"]) in TERMINAL and s,
        timeout=timeout, what=f"experiment {experiment_id} to end"))


def trial(cluster: Cluster, experiment_id: int) -> dict[str, Any]:
    """The experiment's first trial; empty until the experiment has made it."""
    trials = cluster.trials(experiment_id)
    return trials[0] if trials else {}


def metric_steps(cluster: Cluster, trial_id: int, group: str) -> list[int]:
    answer = httpx.get(f"{cluster.url}/api/v1/trials/{trial_id}/metrics",
                       params={"group": group}, headers=cluster.headers, timeout=30).json()
    return [m["stepsCompleted"] for m in answer["metrics"]]


def test_four_ranks_on_two_agents_train_to_the_same_weights(
    cluster: Cluster, tmp_path: Path
) -> None:
    second_agent(cluster)
    experiment_id = create(cluster, config(tmp_path, "ddp"))
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    t = trial(cluster, experiment_id)
    lines = cluster.trial_logs(t["id"])
    text = "\n".join(line["log"] for line in lines)
    # Every rank ran and said so; ranks 0-1 on one agent, 2-3 on the other.
    ranks_by_agent: dict[str, set[int]] = {}
    for line in lines:
        match = re.match(r"\[rank=(\d)\]", line["log"])
        if match:
            ranks_by_agent.setdefault(line["agentId"], set()).add(int(match.group(1)))
    assert sorted(map(sorted, ranks_by_agent.values())) == [[0, 1], [2, 3]], text
    assert set(ranks_by_agent) == {"local-agent", "agent-2"}
    assert "weights identical on 4 ranks" in text, text
    # Reported once per step, by the chief only.
    assert metric_steps(cluster, t["id"], "training") == list(range(10, 201, 10))
    assert metric_steps(cluster, t["id"], "validation") == [50, 100, 150, 200]
    # Both agents' slots are free again.
    agents = cluster.json("agent", "list")["agents"]
    assert all(not slot["container"] for a in agents for slot in a["slots"].values())
    # The allocation history holds the run on both agents (its chief's first).
    now = datetime.now(UTC)
    entries = cluster.get("/resources/allocation/raw",
                          timestampAfter=(now - timedelta(days=1)).isoformat(),
                          timestampBefore=(now + timedelta(days=1)).isoformat())[
        "resourceEntries"]
    [run] = [e for e in entries if e["trialId"] == t["id"]]
    assert (sorted(run["agentIds"]), run["slots"]) == (["agent-2", "local-agent"], 4), run


def test_a_killed_agent_stops_every_rank_and_the_trial_resumes_from_its_checkpoint(
    cluster: Cluster, tmp_path: Path
) -> None:
    agent = second_agent(cluster)
    experiment_id = create(cluster, config(tmp_path, "ddp-kill", batches=250,
                                           step_seconds=0.03))
    wait_for(lambda: trial(cluster, experiment_id).get("latestCheckpointUuid"), timeout=120,
             what="a first checkpoint")
    agent.kill()
    # The other agent's ranks are stopped: its slots come free while agent-2 is away.
    t = trial(cluster, experiment_id)
    wait_for(lambda: "failed" in "\n".join(line["log"] for line in cluster.trial_logs(t["id"])),
             timeout=60, what="the run to fail")
    agent.start()
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    t = trial(cluster, experiment_id)
    assert t["restarts"] >= 1
    text = "\n".join(line["log"] for line in cluster.trial_logs(t["id"]))
    resumed = re.findall(r"\[rank=(\d)\].*rank \d resumed from checkpoint (\S+) at batch (\d+)",
                         text)
    assert sorted(r[0] for r in resumed) == ["0", "1", "2", "3"], text
    assert len({(r[1], r[2]) for r in resumed}) == 1  # one checkpoint for all
    assert "weights identical on 4 ranks" in text
    assert metric_steps(cluster, t["id"], "validation")[-1] == 250


def test_pause_and_activate_resume_every_rank_from_one_checkpoint(
    cluster: Cluster, tmp_path: Path
) -> None:
    second_agent(cluster)
    experiment_id = create(cluster, config(tmp_path, "ddp-pause", batches=200,
                                           step_seconds=0.03))
    wait_for(lambda: trial(cluster, experiment_id).get("totalBatchesProcessed", 0) >= 20,
             timeout=120, what="training to start")
    cluster.run("experiment", "pause", str(experiment_id))
    wait_for(lambda: trial(cluster, experiment_id).get("state") == "STATE_PAUSED", timeout=120,
             what="the trial to pause")
    t = trial(cluster, experiment_id)
    text = "\n".join(line["log"] for line in cluster.trial_logs(t["id"]))
    stopped = re.findall(r"\[rank=(\d)\].*rank \d stops at batch (\d+) \(preempted\)", text)
    assert sorted(s[0] for s in stopped) == ["0", "1", "2", "3"], text
    assert len({s[1] for s in stopped}) == 1  # all at the same batch
    cluster.run("experiment", "activate", str(experiment_id))
    assert wait_done(cluster, experiment_id) == "STATE_COMPLETED"
    text = "\n".join(line["log"] for line in cluster.trial_logs(t["id"]))
    resumed = re.findall(r"\[rank=(\d)\].*resumed from checkpoint (\S+) at batch (\d+)", text)
    assert sorted(r[0] for r in resumed) == ["0", "1", "2", "3"], text
    assert {r[2] for r in resumed} == {stopped[0][1]}
    assert "weights identical on 4 ranks" in text


def test_a_trial_no_agents_can_make_up_is_refused_and_a_larger_one_waits_for_agents(
    cluster: Cluster, tmp_path: Path
) -> None:
    second_agent(cluster)
    three = tmp_path / "three.yaml"
    data = yaml.safe_load(config(tmp_path, "ddp-3").read_text())
    data["resources"]["slots_per_trial"] = 3
    three.write_text(yaml.safe_dump(data))
    answer = cluster.run("experiment", "create", str(three), str(TORCH_DIGITS), check=False)
    said = answer.stdout + answer.stderr
    assert answer.returncode != 0 and "resources.slots_per_trial" in said, said
    assert "needs 3 slots" in said and "multiple of no agent size there (2)" in said, said

    data["resources"]["slots_per_trial"] = 6  # three agents of 2: the pool has two
    six = tmp_path / "six.yaml"
    six.write_text(yaml.safe_dump(data))
    experiment_id = create(cluster, six)
    wait_for(lambda: "waits for agents" in cluster.run("job", "list").stdout, timeout=30,
             what="the job queue to say the trial waits")
    t = trial(cluster, experiment_id)
    wait_for(lambda: any("needs 6 slots" in line["log"] and "2 x 2" in line["log"]
                         for line in cluster.trial_logs(t["id"])), timeout=30,
             what="the trial's logs to say it waits")
    cluster.run("experiment", "kill", str(experiment_id))
    assert wait_done(cluster, experiment_id) == "STATE_CANCELED"
