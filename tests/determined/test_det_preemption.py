"""Issue 38 through Determined 0.38.1's own client: preemption by priority of a Core API script,
and waiting jobs moved ahead of or behind others (UpdateJobQueue's aheadOf/behindOf) on a full
cluster, as `det job list` shows them.

A local cluster (real master and agent processes, one slot, the process runtime with the
Determined venv as task environment, as tests/determined/test_core_api_e2e.py runs it) whose
pool `default` preempts, set by EPOCHAL_MASTER_CONFIG as a Determined master.yaml says it
(`resource_pools[].scheduler: {type: priority, preemption: true}`,
`task_container_defaults.preemption_timeout`). The real `det` binary submits, kills and lists
(its 0.38.1 `det job update` has no --ahead-of/--behind-of: moves go through Determined's client
library and `epochal job update`); what happened is read back through the API. The training
script is tests/determined/preemptible_core/train.py, in Determined's style (`det.core.init()`,
`store_path`, `should_preempt()`, `det.get_cluster_info().latest_checkpoint`).
"""

from __future__ import annotations

import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.determined.det_venv import ensure_det_venv
from tests.determined.test_det_cli import Det, table_rows
from tests.e2e.cluster import Cluster, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

MODEL = Path(__file__).resolve().parent / "preemptible_core"
TERMINAL = {"STATE_COMPLETED", "STATE_ERROR", "STATE_CANCELED"}


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, det_venv: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    master_config = tmp_path_factory.mktemp("det-preemption-master") / "master.yaml"
    master_config.write_text(yaml.safe_dump({
        "resource_pools": [{"pool_name": "default",
                            "scheduler": {"type": "priority", "preemption": True}}],
        "task_container_defaults": {"preemption_timeout": "20s"},
    }))
    with shared_servers_cluster(postgres_url, temporal_address, "det-preemption",
                                "--slots", "1", "--runtime", "process",
                                "--task-env", str(det_venv.parent),
                                env_extra={"EPOCHAL_MASTER_CONFIG": str(master_config)}) as c:
        yield c


@pytest.fixture(scope="module")
def det(cluster: Cluster, det_cli: Path, tmp_path_factory: pytest.TempPathFactory) -> Det:
    home = tmp_path_factory.mktemp("det-preemption-home")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "DET_MASTER": cluster.url,
           "DET_USER": "admin", "DET_PASS": cluster.secrets["admin_password"],
           "PYTHONWARNINGS": "ignore"}
    return Det(det_cli, cluster.url, env)


def config(tmp_path: Path, name: str, *, steps: int, sleep: float, priority: int,
           checkpoint_every: int = 5) -> Path:
    """A Determined experiment config for the preemptible Core API script."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "entrypoint": "python3 train.py", "max_restarts": 0,
        "hyperparameters": {"steps": steps, "sleep": sleep,
                            "checkpoint_every": checkpoint_every},
        "searcher": {"name": "single", "metric": "loss", "smaller_is_better": True},
        "resources": {"priority": priority, "slots_per_trial": 1},
    }))
    return path


def create(det: Det, path: Path) -> int:
    out = det.run("experiment", "create", str(path), str(MODEL)).stdout
    found = re.search(r"Created experiment (\d+)", out)
    assert found, out
    return int(found.group(1))


def trial(cluster: Cluster, experiment_id: int) -> dict[str, Any] | None:
    found = cluster.trials(experiment_id)
    assert len(found) <= 1, found
    return found[0] if found else None


def wait_done(cluster: Cluster, experiment_id: int, timeout: float = 120) -> str:
    return str(wait_for(
        lambda: (s := cluster.experiment(experiment_id)["state"]) in TERMINAL and s,
        timeout, f"experiment {experiment_id} to end"))


def lines(cluster: Cluster, trial_id: int) -> list[str]:
    return [line["log"].rstrip("\n") for line in cluster.trial_logs(trial_id)]


def training_steps(cluster: Cluster, trial_id: int) -> list[int]:
    metrics = cluster.get(f"/trials/{trial_id}/metrics", group="training")["metrics"]
    return [m["stepsCompleted"] for m in metrics]


def test_det_created_priority_1_experiment_preempts_a_core_api_script_that_resumes(
    det: Det, cluster: Cluster, tmp_path: Path
) -> None:
    steps = 30
    [pool] = cluster.get("/resource-pools")["resourcePools"]
    assert pool["details"]["priorityScheduler"]["preemption"] is True
    low = create(det, config(tmp_path, "det-p42", steps=steps, sleep=0.3, priority=42))
    wait_for(lambda: (t := trial(cluster, low)) and t["state"] == "STATE_RUNNING"
             and t["totalBatchesProcessed"] >= 2, 90, "the priority-42 script to train")

    urgent = create(det, config(tmp_path, "det-p1", steps=5, sleep=0.1, priority=1))
    wait_for(lambda: (t := trial(cluster, urgent)) and t["state"] == "STATE_RUNNING", 60,
             "the priority-1 trial to take the slot", interval=0.1)
    victim = trial(cluster, low)
    assert victim is not None and victim["state"] != "STATE_COMPLETED"  # it was preempted
    assert victim["totalBatchesProcessed"] < steps

    assert wait_done(cluster, urgent) == "STATE_COMPLETED"
    assert wait_done(cluster, low) == "STATE_COMPLETED"
    victim = trial(cluster, low)
    assert victim is not None
    assert (victim["runId"], victim["restarts"]) == (2, 0)
    text = lines(cluster, victim["id"])
    assert any("[epochal] preempted" in line and "priority 1" in line for line in text), text
    stopped = next(int(m.group(1)) for line in text
                   if (m := re.search(r"preempted at step (\d+)$", line)))
    # (the resumed run's line names it too)
    [uuid] = {m.group(1) for line in text
              if (m := re.search(rf"checkpoint (\S+) at step {stopped}$", line))}
    assert any(f"resumed from checkpoint {uuid} at step {stopped}" in line for line in text)
    trained = Counter(int(m.group(1)) for line in text
                      if (m := re.search(r"trained step (\d+)$", line)))
    assert trained == Counter(range(1, steps + 1))  # every step once, across both runs
    assert training_steps(cluster, victim["id"]) == list(range(1, steps + 1))
    done = trial(cluster, urgent)
    assert done is not None and training_steps(cluster, done["id"]) == [1, 2, 3, 4, 5]
    assert (done["runId"], done["restarts"]) == (1, 0)


def queued(det: Det) -> list[str]:
    """The waiting jobs' ids as `det job list` lists them."""
    return [r[1] for r in table_rows(det.run("job", "list").stdout) if r[7] == "STATE_QUEUED"]


# Determined 0.38.1's `det job update` takes only --priority, --weight and --resource-pool: its
# web UI moves a job with UpdateJobQueue's aheadOf/behindOf, which this sends through
# Determined's own client library (its login and generated bindings).
MOVE_SCRIPT = """
import os
import sys

from determined.common.api import authentication, bindings, errors

session = authentication.login(os.environ["DET_MASTER"], os.environ["DET_USER"],
                               os.environ["DET_PASS"])
job_id, field, anchor = sys.argv[1:]
control = bindings.v1QueueControl(jobId=job_id, **{field: anchor})
try:
    bindings.post_UpdateJobQueue(session, body=bindings.v1UpdateJobQueueRequest(updates=[control]))
except errors.APIException as err:
    print(f"refused ({err.status_code}): {err.message}")
    sys.exit(1)
print("moved")
"""


def move(det: Det, job_id: str, field: str, anchor: str) -> subprocess.CompletedProcess[str]:
    """UpdateJobQueue with `field` (aheadOf or behindOf) through Determined's client."""
    return subprocess.run([str(ensure_det_venv() / "python"), "-c", MOVE_SCRIPT, job_id, field,
                           anchor], env=det.env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def running_job(cluster: Cluster, experiment_ids: list[int]) -> int | None:
    """Which of the experiments' trials runs now (the cluster has one slot)."""
    found = [e for e in experiment_ids
             if (t := trial(cluster, e)) and t["state"] == "STATE_RUNNING"]
    assert len(found) <= 1, found
    return found[0] if found else None


def test_jobs_move_ahead_of_and_behind_other_waiting_jobs(
    det: Det, cluster: Cluster, tmp_path: Path
) -> None:
    """The cluster's one slot runs a job and three wait: Determined's client moves one ahead of
    another (it takes that one's priority), `epochal job update --behind-of` moves one behind
    another, and the pool then serves them in the new order as the slot frees; an unknown or
    ended anchor is refused, naming aheadOf or behindOf. `det job list` lists them so."""
    def long(name: str, priority: int) -> int:  # trains until killed
        return create(det, config(tmp_path, name, steps=100_000, sleep=0.5, priority=priority,
                                  checkpoint_every=100_000))

    holder = long("det-job-running", 42)
    made = [holder]
    listed: list[tuple[list[str], list[str]]] = []  # (`det job list`'s order, the right one)
    try:
        wait_for(lambda: running_job(cluster, made) == holder, 90, "the first job to run")
        # Three wait: two at 42, one at 50 (none above the running job, so nothing preempts).
        for name, priority in (("first", 42), ("second", 42), ("third", 50)):
            made.append(long(f"det-job-{name}", priority))
        first, second, third = made[1:]
        job = {e: f"experiment-{e}" for e in made}
        wait_for(lambda: len([j for j in cluster.get("/job-queues")["jobs"]
                              if j["summary"]["state"] == "STATE_QUEUED"]) == 3, 60,
                 "three jobs to wait")
        assert queued(det) == [job[first], job[second], job[third]]

        moved = move(det, job[third], "aheadOf", job[first])
        assert moved.returncode == 0 and "moved" in moved.stdout, moved.stdout + moved.stderr
        wait_for(lambda: {r[1]: r for r in table_rows(det.run("job", "list").stdout)}[
            job[third]][4] == "42", 30, "the moved job to take its anchor's priority")
        assert yaml.safe_load(det.run("experiment", "config", str(third)).stdout)[
            "resources"]["priority"] == 42
        listed.append((queued(det), [job[third], job[first], job[second]]))

        said = cluster.run("job", "update", job[first], "--behind-of", job[second]).stdout
        assert job[second] in said, said
        listed.append((queued(det), [job[third], job[second], job[first]]))

        unknown = move(det, job[first], "aheadOf", "experiment-999999")
        assert unknown.returncode == 1, unknown.stdout + unknown.stderr
        assert "refused (400)" in unknown.stdout and "aheadOf" in unknown.stdout, unknown.stdout
        assert "experiment-999999" in unknown.stdout, unknown.stdout

        # The slot frees: the pool serves the moved order, third, second, then first.
        # (A killed trial gives its slot back before it records CANCELED: it is left out.)
        det.run("experiment", "kill", str(holder))
        wait_for(lambda: running_job(cluster, made[1:]) == third, 60,
                 "the third job to run next")
        listed.append((queued(det), [job[second], job[first]]))
        det.run("experiment", "kill", str(third))
        wait_for(lambda: running_job(cluster, [first, second]) == second, 60,
                 "the second job to run before the first")
        assert trial(cluster, first)["state"] == "STATE_QUEUED"  # type: ignore[index]

        assert wait_done(cluster, third, 60) == "STATE_CANCELED"
        ended = cluster.run("job", "update", job[first], "--behind-of", job[third], check=False)
        said = ended.stdout + ended.stderr
        assert ended.returncode != 0 and "Traceback" not in said, said
        assert "behindOf" in said and job[third] in said and "ended" in said, said
        refused = move(det, job[first], "aheadOf", job[third])
        assert refused.returncode == 1 and "aheadOf" in refused.stdout, refused.stdout
    finally:
        for experiment_id in made:
            det.run("experiment", "kill", str(experiment_id), check=False)
        for experiment_id in made:
            wait_done(cluster, experiment_id, 60)
    assert all(shown == right for shown, right in listed), (
        f"`det job list` shows the queue as the pool serves it: (shown, right) {listed}")
