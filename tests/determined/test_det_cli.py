"""Determined 0.38.1's own `det` CLI against an Epochal cluster: each command prints what it
prints against a Determined master (same columns, same states), with Epochal's data.

A real local cluster (master and agent processes) and the real `det` binary from the Determined
venv, run as a subprocess with a private HOME; it logs in as admin through DET_USER/DET_PASS the way
Determined's client does (POST /api/v1/auth/login with the hashed password). One finished
digits experiment serves the read-only checks; a slow one is paused, activated and killed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.determined.det_venv import ensure_det_venv
from tests.e2e.cluster import DIGITS, SLOW_MODEL, Cluster, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

AGENT_ID = "local-agent"


@dataclass
class Det:
    """Runs `det -m URL ...` as a user would, logged in as admin."""

    binary: Path
    url: str
    env: dict[str, str]

    def run(self, *args: str, check: bool = True, timeout: float = 180) -> (
            subprocess.CompletedProcess[str]):
        result = subprocess.run(
            [str(self.binary), "-m", self.url, *args], env=self.env, capture_output=True,
            text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
        if check:
            command = " ".join(args)
            assert result.returncode == 0, f"det {command}:\n{result.stdout}\n{result.stderr}"
        return result

    def rows(self, *args: str) -> list[list[str]]:
        """The rows of the table a command prints (cells stripped, header and rule dropped,
        continuation lines of multi-line cells dropped)."""
        return table_rows(self.run(*args).stdout)


def refused(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The message of a command that failed without a traceback, holding `words`."""
    said = result.stdout + result.stderr
    assert result.returncode != 0, said
    assert "Traceback" not in result.stderr, said
    for word in words:
        assert word in said, said
    return said


def table_rows(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if "|" in line and not line.startswith("---")]
    cells = [[c.strip() for c in line.split("|")] for line in lines]
    return [row for row in cells[1:] if row[0]]


def header(text: str) -> list[str]:
    first = next(line for line in text.splitlines() if "|" in line)
    return [c.strip() for c in first.split("|")]


@dataclass
class Finished:
    experiment_id: int
    trial_id: int
    create_output: str


@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, det_venv: Path) -> Iterator[Cluster]:
    # Its trials run the Determined venv's python by path: it stays visible where the sandbox
    # would hide it (under the agent user's home, or /tmp, which each run has of its own).
    share = {"EPOCHAL_SHARE_WITH_TRIALS": str(det_venv.parent.resolve())}
    with shared_servers_cluster(postgres_url, temporal_address, "det-cli", "--slots", "2",
                                env_extra=share) as c:
        yield c


@pytest.fixture(scope="module")
def det(cluster: Cluster, det_cli: Path, tmp_path_factory: pytest.TempPathFactory) -> Det:
    home = tmp_path_factory.mktemp("det-home")  # ~/.determined and its token store
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "DET_MASTER": cluster.url,
        "DET_USER": "admin",
        "DET_PASS": cluster.secrets["admin_password"],
        "PYTHONWARNINGS": "ignore",
    }
    return Det(det_cli, cluster.url, env)


@pytest.fixture(scope="module")
def finished(det: Det) -> Finished:
    """`det experiment create -f`: follows the first trial's logs until the trial ends."""
    result = det.run("experiment", "create", str(DIGITS / "single.yaml"), str(DIGITS), "-f")
    created = re.search(r"Created experiment (\d+)", result.stdout)
    following = re.search(r"Following first trial with ID (\d+)", result.stdout)
    assert created and following, result.stdout
    return Finished(int(created.group(1)), int(following.group(1)), result.stdout)


def test_master_info_and_no_version_warning(det: Det) -> None:
    result = det.run("master", "info")
    info = yaml.safe_load(result.stdout)
    assert info["clusterName"] == "epochal"
    assert info["clusterId"] and info["masterId"]
    assert "version" not in result.stderr.lower()  # det compares versions before each command


def test_create_follows_the_first_trial_to_its_end(det: Det, finished: Finished) -> None:
    assert "Waiting for first trial to begin..." in finished.create_output
    assert "completed after 300 batches" in finished.create_output
    assert f"det trial logs -f {finished.trial_id}" in finished.create_output
    assert det.run("experiment", "wait", str(finished.experiment_id)).returncode == 0


def test_experiment_list(det: Det, finished: Finished) -> None:
    out = det.run("experiment", "list").stdout
    assert header(out) == ["ID", "Owner", "Name", "Parent ID", "State", "Progress", "Started",
                           "Ended", "Resource Pool"]
    row = next(r for r in table_rows(out) if r[0] == str(finished.experiment_id))
    assert row[1:3] == ["admin", "digits-single"]
    assert row[4:6] == ["COMPLETED", "100.0%"]
    assert row[7] and row[8] == "default"

    csv = det.run("experiment", "list", "--csv").stdout.splitlines()
    assert csv[0] == "ID,Owner,Name,Parent ID,State,Progress,Started,Ended,Resource Pool"
    assert any(line.startswith(f"{finished.experiment_id},admin,digits-single,,COMPLETED,")
               for line in csv)


def test_archive_hides_from_the_default_list(det: Det, finished: Finished) -> None:
    exp = str(finished.experiment_id)
    assert det.run("experiment", "archive", exp).stdout.strip() == f"Archived experiment {exp}"
    try:
        assert exp not in [r[0] for r in det.rows("experiment", "list")]
        listed = det.run("experiment", "list", "--all").stdout
        assert header(listed)[-1] == "Archived"
        assert next(r for r in table_rows(listed) if r[0] == exp)[-1] == "True"
    finally:
        det.run("experiment", "unarchive", exp)
    assert exp in [r[0] for r in det.rows("experiment", "list")]


def test_description_and_labels(det: Det, finished: Finished) -> None:
    exp = str(finished.experiment_id)
    det.run("experiment", "set", "description", exp, "set by det")
    det.run("experiment", "label", "add", exp, "blue")
    det.run("experiment", "label", "add", exp, "green")
    det.run("experiment", "label", "remove", exp, "green")
    out = det.run("experiment", "describe", exp).stdout.split("\nTrials:\n")[0]
    columns = dict(zip(header(out), table_rows(out)[0], strict=True))
    assert (columns["Description"], columns["Labels"]) == ("set by det", "blue")


def test_experiment_describe(det: Det, finished: Finished) -> None:
    out = det.run("experiment", "describe", str(finished.experiment_id)).stdout
    experiment, trials, workloads = out.split("\nTrials:\n")[0], *out.split(
        "\nTrials:\n")[1].split("\nWorkloads:\n")
    assert header(experiment)[:3] == ["Experiment ID", "State", "Progress"]
    assert table_rows(experiment)[0][:3] == [str(finished.experiment_id), "COMPLETED", "100.0%"]
    assert table_rows(trials)[0][:3] == [str(finished.trial_id), str(finished.experiment_id),
                                         "COMPLETED"]
    steps = {r[1] for r in table_rows(workloads)}
    assert {"50", "300"} <= steps
    last = next(r for r in table_rows(workloads) if r[1] == "300")
    assert "COMPLETED" in last  # the checkpoint and validation at the last step


def test_list_trials(det: Det, finished: Finished) -> None:
    out = det.run("experiment", "list-trials", str(finished.experiment_id)).stdout
    assert header(out) == ["Trial ID", "State", "H-Params", "Started", "Ended", "# of Batches"]
    (row,) = table_rows(out)
    assert [row[0], row[1], row[5]] == [str(finished.trial_id), "COMPLETED", "300"]


def test_checkpoints_list_and_describe(det: Det, finished: Finished) -> None:
    out = det.run("experiment", "list-checkpoints", str(finished.experiment_id)).stdout
    assert header(out) == ["Trial ID", "# of Batches", "State", "Validation Metric", "UUID",
                           "Resources", "Size"]
    kept = [r for r in table_rows(out) if r[2] == "COMPLETED"]
    assert [r[1] for r in kept] == ["300"]  # the retention policy deleted the others
    uuid = kept[0][4]
    assert float(kept[0][3]) > 0  # validation_loss at that step

    best = table_rows(det.run("experiment", "list-checkpoints", "--best", "1",
                              str(finished.experiment_id)).stdout)
    assert [r[4] for r in best] == [uuid]

    text = det.run("checkpoint", "describe", uuid).stdout
    assert header(text)[:5] == ["Experiment ID", "Trial ID", "Steps Completed", "Report Time",
                                "Checkpoint UUID"]
    values = table_rows(text)[0]
    assert values[:3] == [str(finished.experiment_id), str(finished.trial_id), "300"]
    assert values[4] == uuid


def test_trial_describe(det: Det, finished: Finished) -> None:
    out = det.run("trial", "describe", str(finished.trial_id)).stdout
    trial, workloads = out.split("\nWorkloads:\n")
    assert header(trial) == ["Experiment ID", "State", "H-Params", "Summary Metrics", "Started",
                             "Ended"]
    assert table_rows(trial)[0][:2] == [str(finished.experiment_id), "COMPLETED"]
    assert header(workloads)[:4] == ["# of Batches", "Report Time", "Checkpoint",
                                     "Checkpoint UUID"]
    checkpointed = [r for r in table_rows(workloads) if r[2] == "COMPLETED"]
    assert [r[0] for r in checkpointed] == ["300"] and re.fullmatch(r"[0-9a-f-]{36}",
                                                                     checkpointed[0][3])


def test_trial_and_experiment_logs(det: Det, finished: Finished) -> None:
    trial = str(finished.trial_id)
    logs = det.run("trial", "logs", trial).stdout
    assert "completed after 300 batches" in logs
    assert re.search(r"^\[\d{4}-\d\d-\d\dT[^]]+\] \|\| ", logs, re.M)  # Determined's line form
    tail = det.run("trial", "logs", "--tail", "1", trial).stdout.splitlines()
    assert "completed after 300 batches" in tail[0]
    followed = det.run("trial", "logs", "-f", trial, timeout=60).stdout  # ends: trial is done
    assert "completed after 300 batches" in followed
    assert "completed after 300 batches" in det.run(
        "experiment", "logs", str(finished.experiment_id)).stdout


def test_agent_and_slot_list(det: Det) -> None:
    agents = det.run("agent", "list").stdout
    assert header(agents) == ["Agent ID", "Version", "Registered Time", "Slots", "Containers",
                              "Resource Pool", "Enabled", "Draining", "Addresses"]
    (agent,) = table_rows(agents)
    assert [agent[0], agent[3], agent[5], agent[6]] == [AGENT_ID, "2", "default", "True"]

    slots = det.run("slot", "list").stdout
    assert header(slots) == ["Agent ID", "Resource Pool", "Slot ID", "Enabled", "Draining",
                             "Allocation ID", "Task Name", "Type", "Device"]
    assert sorted(r[2] for r in table_rows(slots)) == ["0", "1"]
    assert all(r[0] == AGENT_ID and r[7] == "cpu" for r in table_rows(slots))


def _slow_config(tmp_path: Path, name: str) -> Path:
    config = {
        "name": name,
        "entrypoint": "python3 train.py",
        "hyperparameters": {"sleep": 0.2, "checkpoint_every": 5},
        "searcher": {"name": "single", "metric": "validation_loss", "smaller_is_better": True,
                     "max_length": {"batches": 1000}},
        "max_restarts": 0,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _trial_state(det: Det, experiment: str) -> tuple[str, str]:
    """The experiment's one trial's id and state; ("", "") before its experiment made it."""
    rows = det.rows("experiment", "list-trials", experiment)
    assert len(rows) <= 1, rows
    return (rows[0][0], rows[0][1]) if rows else ("", "")


def _experiment_state(det: Det, experiment: str) -> str:
    return next(r for r in det.rows("experiment", "list", "--all") if r[0] == experiment)[4]


def _wait_for_trial(cluster: Cluster, det: Det, experiment: str, state: str, timeout: float,
                    what: str) -> None:
    """Wait through the API (a `det` process per poll costs a third of a core), then check that
    `det experiment list-trials` says `state` too."""
    wait_for(lambda: [t["state"] for t in cluster.trials(int(experiment))] == [f"STATE_{state}"],
             timeout, what)
    assert _trial_state(det, experiment)[1] == state


def test_pause_activate_kill_and_delete(det: Det, cluster: Cluster, tmp_path: Path) -> None:
    created = det.run("experiment", "create", str(_slow_config(tmp_path, "det-slow")),
                      str(SLOW_MODEL)).stdout
    experiment = re.search(r"Created experiment (\d+)", created).group(1)  # type: ignore[union-attr]
    _wait_for_trial(cluster, det, experiment, "RUNNING", 90, "the trial to run")
    trial = _trial_state(det, experiment)[0]

    busy = [r for r in det.rows("slot", "list") if r[5] != "FREE"]
    assert [(r[5], r[6]) for r in busy] == [
        (f"{experiment}.{trial}.1", f"Trial {trial} (Experiment {experiment})")]

    assert det.run("experiment", "pause", experiment).stdout.strip() == (
        f"Paused experiment {experiment}")
    _wait_for_trial(cluster, det, experiment, "PAUSED", 60, "the trial to pause")
    assert _experiment_state(det, experiment) == "PAUSED"
    assert det.run("experiment", "wait", experiment, check=False).returncode != 0  # paused

    assert det.run("experiment", "activate", experiment).stdout.strip() == (
        f"Activated experiment {experiment}")
    _wait_for_trial(cluster, det, experiment, "RUNNING", 90, "the trial to resume")
    assert _experiment_state(det, experiment) == "ACTIVE"

    assert det.run("experiment", "kill", experiment).stdout.strip() == (
        f"Killed experiment {experiment}")
    waited = det.run("experiment", "wait", "--polling-interval", "1", experiment, check=False)
    assert waited.returncode == 1  # Determined's exit status for any end but COMPLETED
    assert _experiment_state(det, experiment) == "CANCELED"
    assert _trial_state(det, experiment)[1] == "CANCELED"

    det.run("experiment", "delete", "--yes", experiment)
    assert experiment not in [r[0] for r in det.rows("experiment", "list", "--all")]
    gone = det.run("experiment", "describe", experiment, check=False)
    assert gone.returncode != 0 and "not found" in (gone.stdout + gone.stderr).lower()


def test_cancel(det: Det, tmp_path: Path) -> None:
    created = det.run("experiment", "create", str(_slow_config(tmp_path, "det-cancel")),
                      str(SLOW_MODEL)).stdout
    experiment = re.search(r"Created experiment (\d+)", created).group(1)  # type: ignore[union-attr]
    assert det.run("experiment", "cancel", experiment).stdout.strip() == (
        f"Canceled experiment {experiment}")
    assert det.run("experiment", "wait", "--polling-interval", "1", experiment,
                   check=False).returncode == 1
    assert _experiment_state(det, experiment) == "CANCELED"


def test_trial_kill_ends_that_trial_only(det: Det, cluster: Cluster, tmp_path: Path) -> None:
    created = det.run("experiment", "create", str(_slow_config(tmp_path, "det-trial-kill")),
                      str(SLOW_MODEL)).stdout
    experiment = re.search(r"Created experiment (\d+)", created).group(1)  # type: ignore[union-attr]
    _wait_for_trial(cluster, det, experiment, "RUNNING", 90, "the trial to run")
    trial = _trial_state(det, experiment)[0]
    det.run("trial", "kill", trial)
    _wait_for_trial(cluster, det, experiment, "CANCELED", 60, "the trial to end")
    # Its search had one trial, now stopped by its user: the experiment ends, not in error.
    wait_for(lambda: _experiment_state(det, experiment) == "COMPLETED", 60, "the experiment")
    again = det.run("trial", "kill", trial, check=False)
    assert again.returncode != 0 and "CANCELED" in again.stdout + again.stderr


def test_user_list_and_a_trials_checkpoints(det: Det, finished: Finished, tmp_path: Path) -> None:
    users = det.run("user", "list").stdout
    column = header(users).index("Username")
    assert "admin" in [row[column] for row in table_rows(users)]
    # The trial's checkpoints as Determined's SDK pages through them (`det trial download
    # --best/--latest` lists them so, then downloads the last downloadable one it pops).
    listed = subprocess.run(
        [str(ensure_det_venv() / "python"), "-c", LIST_TRIAL_CHECKPOINTS,
         str(finished.trial_id)],
        env=det.env, capture_output=True, text=True, timeout=120, check=True,
    ).stdout.splitlines()
    by_batches = [line.split() for line in listed]
    assert [int(b) for b, _, _ in by_batches] == sorted(int(b) for b, _, _ in by_batches)
    (kept,) = [uuid for _, state, uuid in by_batches if state == "STATE_COMPLETED"]
    # (`det trial download --uuid` itself fails in 0.38.1's client: it counts the flags with
    # `[..., args.uuid].count(True)`; `det checkpoint download` is the working spelling.)
    out = det.run("checkpoint", "download", kept, "-q", "-o", str(tmp_path / "kept")).stdout
    assert out.strip() == str(tmp_path / "kept")
    assert any((tmp_path / "kept").iterdir())


LIST_TRIAL_CHECKPOINTS = """
import sys
from determined.experimental import client
client.login()
for c in client.get_trial(int(sys.argv[1])).list_checkpoints(
        sort_by=client.CheckpointSortBy.BATCH_NUMBER, order_by=client.OrderBy.ASC):
    print(c.metadata.get("steps_completed"), c.state.value, c.uuid)
"""


CORE_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "determined_core"


def test_a_core_api_script_driven_by_det_from_create_to_completion(
    det: Det, cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    """The issue's whole story: `det` creates an experiment whose script is written for
    Determined's Core API (metrics, checkpoints, preemption, restore), pauses and activates it,
    and both `det` and `epochal` see it complete with its trials, checkpoints and logs."""
    config = yaml.safe_load((CORE_EXAMPLE / "const.yaml").read_text())
    config["entrypoint"] = f"{det_venv / 'python'} train.py"
    config["searcher"]["max_length"] = {"batches": 600}
    config["hyperparameters"].update(validation_period=50, seconds_per_batch=0.02)
    path = tmp_path / "core.yaml"
    path.write_text(yaml.safe_dump(config))

    created = det.run("experiment", "create", str(path), str(CORE_EXAMPLE)).stdout
    experiment = re.search(r"Created experiment (\d+)", created).group(1)  # type: ignore[union-attr]
    wait_for(lambda: [r for r in det.rows("experiment", "list-checkpoints", experiment)
                      if r[2] == "COMPLETED"], 120, "a first checkpoint")
    trial = _trial_state(det, experiment)[0]

    det.run("experiment", "pause", experiment)
    _wait_for_trial(cluster, det, experiment, "PAUSED", 120, "the trial to pause")
    preempted = det.run("trial", "logs", trial).stdout
    assert "preempted at batch" in preempted

    det.run("experiment", "activate", experiment)
    waited = det.run("experiment", "wait", "--polling-interval", "1", experiment, timeout=300,
                     check=False)
    assert waited.returncode == 0, waited.stdout + waited.stderr

    described = det.run("experiment", "describe", experiment).stdout
    assert table_rows(described)[0][:2] == [experiment, "COMPLETED"]
    epochal = cluster.json("experiment", "describe", experiment)
    assert epochal["experiment"]["state"] == "STATE_COMPLETED"
    [epochal_trial] = epochal["trials"]
    assert epochal_trial["totalBatchesProcessed"] == 600
    assert epochal_trial["bestValidation"]["metrics"]["avgMetrics"]["validation_loss"] >= 0

    (row,) = det.rows("experiment", "list-trials", experiment)
    assert [row[0], row[1], row[5]] == [trial, "COMPLETED", "600"]
    kept = [r for r in det.rows("experiment", "list-checkpoints", experiment)
            if r[2] == "COMPLETED"]
    assert "600" in [r[1] for r in kept]
    logs = det.run("trial", "logs", trial).stdout
    assert "resumed from checkpoint" in logs  # restored from the latest checkpoint


HOOKED_TRAIN = """\
import os
import pathlib

import determined as det

with det.core.init() as core:
    answer = pathlib.Path(os.environ["DATA_DIR"], "answer.txt").read_text()
    core.train.report_validation_metrics(steps_completed=1, metrics={"answer": float(answer)})
"""


def test_a_startup_hook_prepares_the_run_and_a_failing_one_fails_it(
    det: Det, cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    """As on Determined: `startup-hook.sh` at the top of the context is sourced before the
    entrypoint, in its shell (what it exports and writes, the script reads), its output in
    the trial's logs; a hook that fails fails the run, naming the hook and its last lines."""
    contexts = {}
    for name, hook in (("hooked", 'export DATA_DIR="$PWD/prepared"\nmkdir -p prepared\n'
                                  'echo 42 > prepared/answer.txt\necho "hook: data prepared"\n'),
                       ("broken", "echo 'ERROR: No matching distribution found for torch==9.9'"
                                  "\nfalse\n")):
        context = tmp_path / name
        context.mkdir()
        (context / "startup-hook.sh").write_text(hook)
        (context / "train.py").write_text(HOOKED_TRAIN)
        config = {"name": f"det-{name}", "entrypoint": f"{det_venv / 'python'} train.py",
                  "searcher": {"name": "single", "metric": "answer",
                               "max_length": {"batches": 1}},
                  "max_restarts": 0}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        contexts[name] = _created(det.run("experiment", "create", str(tmp_path / f"{name}.yaml"),
                                          str(context)).stdout)
    for name, state in (("hooked", "COMPLETED"), ("broken", "ERROR")):
        _wait_for_trial(cluster, det, contexts[name], state, 120, f"the {name} trial to end")
    hooked = cluster.json("experiment", "describe", contexts["hooked"])
    [trial] = hooked["trials"]
    assert trial["bestValidation"]["metrics"]["avgMetrics"]["answer"] == 42
    logs = det.run("trial", "logs", str(trial["id"])).stdout
    assert "[epochal] sourcing startup-hook.sh" in logs and "hook: data prepared" in logs
    broken = _trial_state(det, contexts["broken"])[0]
    logs = det.run("trial", "logs", broken).stdout
    assert "the startup hook startup-hook.sh failed (exited with code 1); its last lines:" in logs
    assert "No matching distribution found for torch==9.9" in logs.split("its last lines:")[1]


# Determined's batch inference (torch_batch_process), in the style of its
# torch_batch_process_core_api_comparison example: data prepared in `../data`, each batch's
# output uploaded to the checkpoint storage and written to a host directory bound in.
BATCH_PROCESS = """
import os
import pathlib

import torch
from determined.pytorch import experimental


class Doubler(experimental.TorchBatchProcessor):
    def __init__(self, context):
        self.context = context

    def process_batch(self, batch, batch_idx) -> None:
        doubled = batch[0] * 2
        with self.context.upload_path() as path:
            torch.save(doubled, pathlib.Path(path, f"doubled_{batch_idx}"))
        pathlib.Path("predictions", f"batch_{batch_idx}.txt").write_text(
            " ".join(str(int(x)) for x in doubled.flatten()))


def main():
    data = pathlib.Path("../data")
    data.mkdir(parents=True, exist_ok=True)
    torch.save(torch.arange(20.0).reshape(10, 2), data / "inputs.pt")
    inputs = torch.load(data / "inputs.pt")
    experimental.torch_batch_process(
        Doubler, torch.utils.data.TensorDataset(inputs), batch_size=5, checkpoint_interval=1)


if __name__ == "__main__":
    main()
"""


def test_determineds_batch_inference_writes_beside_its_workdir_and_into_a_bind_mount(
    det: Det, cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    """Determined's `torch_batch_process` completes on its first run: its `../data` is the
    run's own, the host directory it binds receives its predictions (the process runtime binds
    it as Docker would), and the shared_fs storage it reads is shared_fs, as Determined gives
    it."""
    context, predictions = tmp_path / "context", tmp_path / "predictions"
    context.mkdir()
    predictions.mkdir(mode=0o777)
    predictions.chmod(0o777)  # as an admin gives a team's runs a directory of the host
    (context / "infer.py").write_text(BATCH_PROCESS)
    config = {"name": "det-batch", "entrypoint": f"{det_venv / 'python'} infer.py",
              "searcher": {"name": "single", "metric": "x", "max_length": {"batches": 1}},
              "bind_mounts": [{"host_path": str(predictions), "container_path": "predictions",
                               "read_only": False}],
              "max_restarts": 0}
    (tmp_path / "batch.yaml").write_text(yaml.safe_dump(config))
    experiment = _created(det.run("experiment", "create", str(tmp_path / "batch.yaml"),
                                  str(context)).stdout)
    _wait_for_trial(cluster, det, experiment, "COMPLETED", 180, "the batch inference to end")
    assert sorted(p.name for p in predictions.iterdir()) == ["batch_0.txt", "batch_1.txt"]
    assert (predictions / "batch_1.txt").read_text() == " ".join(
        str(2 * x) for x in range(10, 20))
    trial = _trial_state(det, experiment)[0]
    logs = det.run("trial", "logs", trial).stdout
    assert "not implemented" not in logs and "Traceback" not in logs, logs


# A detached run in the style of Determined's examples/features/unmanaged: a script on the
# user's machine reports to the cluster through core_v2, which runs nothing of it.
DETACHED = """
import sys

from determined.experimental import core_v2

core_v2.init(config=core_v2.Config(
    name="detached-run", checkpoint_storage=sys.argv[1],
    external_experiment_id=sys.argv[2], external_trial_id=sys.argv[2],
    hparams={"lr": 0.5}))
start = core_v2.info.latest_checkpoint
print("detached run starts from", start, flush=True)
for step in range(1, 4):
    core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1 / step})
core_v2.train.report_validation_metrics(steps_completed=3, metrics={"loss": 0.25})
with core_v2.checkpoint.store_path({"steps_completed": 3}) as (path, uuid):
    (path / "weights.txt").write_text("trained")
core_v2.close()
"""

# A managed trial using Determined's Python SDK with no login, as on Determined (DET_USER_TOKEN).
SDK_IN_A_TRIAL = """
import os
import pathlib
import sys

import determined as det
from determined.experimental import client

experiment = client.Determined().get_experiment(int(os.environ["DET_EXPERIMENT_ID"]))
experiment.reload()
print("the SDK sees", experiment.name, flush=True)
pathlib.Path(sys.argv[1], "token").write_text(os.environ["DET_USER_TOKEN"])
with det.core.init() as core:
    core.train.report_validation_metrics(steps_completed=1, metrics={"answer": 42.0})
"""


def test_a_detached_core_v2_run_reports_to_the_cluster_and_det_shows_it(
    det: Det, cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    """Determined's unmanaged mode: the experiment and its trial made by the script (by external
    id, so a second run resumes them), its metrics, checkpoint and output, shown by `det` like
    any other experiment, marked unmanaged; the cluster ran none of it."""
    script, storage = tmp_path / "detached.py", tmp_path / "storage"
    script.write_text(DETACHED)
    external = f"detached-{uuid.uuid4().hex[:8]}"
    env = {**det.env, "DET_MASTER": cluster.url}
    for _ in range(2):  # run again: the same experiment and trial, resumed
        ran = subprocess.run([str(det_venv / "python"), str(script), str(storage), external],
                             env=env, capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        assert ran.returncode == 0, ran.stdout + ran.stderr
    described = cluster.json("experiment", "list")
    [experiment] = [e for e in described["experiments"] if e["name"] == "detached-run"]
    assert experiment["unmanaged"] is True and experiment["state"] == "STATE_COMPLETED"
    shown = det.run("experiment", "describe", str(experiment["id"])).stdout
    assert "detached-run" in shown and "COMPLETED" in shown
    [trial] = cluster.trials(experiment["id"])
    assert trial["state"] == "STATE_COMPLETED" and trial["hparams"] == {"lr": 0.5}
    # Its searcher metric is core_v2's placeholder ("unmanaged"), so no best validation.
    assert trial["runId"] == 2, trial
    assert trial["latestValidation"]["metrics"]["avgMetrics"] == {"loss": 0.25}, trial
    listed = det.run("experiment", "list-checkpoints", str(experiment["id"])).stdout
    uuids = re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", listed)
    assert len(uuids) == 2, listed  # one per run, both in the storage the script named
    assert [(storage / u / "weights.txt").read_text() for u in uuids] == ["trained"] * 2
    # The second run resumed from the first one's checkpoint; both runs' output is the trial's.
    [first] = [u for u in uuids if u != trial["latestCheckpointUuid"]]
    logs = det.run("trial", "logs", str(trial["id"])).stdout
    assert "detached run starts from None" in logs and f"starts from {first}" in logs, logs
    # The cluster cannot pause a script it does not run, and says so.
    paused = det.run("experiment", "pause", str(experiment["id"]), check=False)
    assert paused.returncode != 0 and "Traceback" not in paused.stderr


def test_a_detached_runs_storage_may_be_anywhere_and_the_master_never_touches_it(
    det: Det, cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    """core_v2's storage is a directory of the script's host (by default under its user's
    home): accepted outside the cluster's roots, where the master neither reads nor deletes."""
    script = tmp_path / "detached.py"
    script.write_text(DETACHED)
    storage = Path("/var/lib") / f"epochal-test-detached-{uuid.uuid4().hex[:8]}"  # no root
    try:
        ran = subprocess.run([str(det_venv / "python"), str(script), str(storage),
                              f"outside-{uuid.uuid4().hex[:8]}"],
                             env={**det.env, "DET_MASTER": cluster.url}, capture_output=True,
                             text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        [checkpoint] = [p.parent.name for p in storage.glob("*/weights.txt")]
        files = httpx.get(f"{cluster.url}/api/v1/checkpoints/{checkpoint}/files",
                          headers=cluster.headers, timeout=30)
        assert files.status_code == 409 and "outside the directories this master reads and "\
            "deletes in" in files.json()["message"], files.text
        described = httpx.get(f"{cluster.url}/api/v1/checkpoints/{checkpoint}",
                              headers=cluster.headers, timeout=30).json()["checkpoint"]
        experiment = str(described["training"]["experimentId"])
        det.run("experiment", "delete", experiment, "--yes")
        wait_for(lambda: experiment not in [r[0] for r in det.rows("experiment", "list",
                                                                   "--all")],
                 60, "the detached experiment to be deleted")
        assert (storage / checkpoint / "weights.txt").read_text() == "trained"  # kept
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def test_a_managed_trial_uses_determineds_sdk_with_its_owners_session(
    det: Det, cluster: Cluster, det_venv: Path, tmp_path: Path
) -> None:
    """`client.Determined()` in a trial logs in with no password, as its owner
    (DET_USER_TOKEN), and that session ends with the trial."""
    context, out = tmp_path / "context", tmp_path / "out"
    context.mkdir()
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    (context / "train.py").write_text(SDK_IN_A_TRIAL)
    config = {"name": "det-sdk-in-trial", "entrypoint": f"{det_venv / 'python'} train.py out",
              "searcher": {"name": "single", "metric": "answer", "max_length": {"batches": 1}},
              "bind_mounts": [{"host_path": str(out), "container_path": "out"}],
              "max_restarts": 0}
    (tmp_path / "sdk.yaml").write_text(yaml.safe_dump(config))
    experiment = _created(det.run("experiment", "create", str(tmp_path / "sdk.yaml"),
                                  str(context)).stdout)
    _wait_for_trial(cluster, det, experiment, "COMPLETED", 120, "the SDK trial to end")
    logs = det.run("trial", "logs", _trial_state(det, experiment)[0]).stdout
    assert "the SDK sees det-sdk-in-trial" in logs, logs
    token = (out / "token").read_text()
    answer = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                             f"Authorization: Bearer {token}", f"{cluster.url}/api/v1/me"],
                            capture_output=True, text=True, timeout=30)
    assert answer.stdout == "401"  # revoked with the trial's end


def _created(output: str) -> str:
    found = re.search(r"Created experiment (\d+)", output)
    assert found, output
    return found.group(1)


def _jobs(det: Det) -> dict[str, list[str]]:
    return {r[1]: r for r in det.rows("job", "list")}


def test_job_list_and_experiment_scheduling_changes(
    det: Det, cluster: Cluster, tmp_path: Path
) -> None:
    """`det job list` shows what runs and what waits in the scheduler's order; `det experiment
    set priority|max-slots|weight` and `det job update` reorder what waits."""
    paths = []
    for name in ("det-job-a", "det-job-b", "det-job-c"):
        path = _slow_config(tmp_path, name)
        config = yaml.safe_load(path.read_text())
        config["resources"] = {"slots_per_trial": 2}  # the cluster's 2 slots: one at a time
        path.write_text(yaml.safe_dump(config))
        paths.append(path)
    first = _created(det.run("experiment", "create", str(paths[0]), str(SLOW_MODEL)).stdout)
    _wait_for_trial(cluster, det, first, "RUNNING", 90, "the first trial to run")
    second = _created(det.run("experiment", "create", str(paths[1]), str(SLOW_MODEL)).stdout)
    third = _created(det.run("experiment", "create", str(paths[2]), str(SLOW_MODEL)).stdout)
    try:
        wait_for(lambda: {f"experiment-{e}" for e in (second, third)} <= set(_jobs(det)), 60,
                 "both to queue")
        out = det.run("job", "list").stdout
        assert header(out) == ["#", "ID", "Type", "Job Name", "Priority", "Submitted",
                               "Slots (acquired/needed)", "State", "User"]
        rows = table_rows(out)
        running = next(r for r in rows if r[1] == f"experiment-{first}")
        assert running[2:5] == ["TYPE_EXPERIMENT", f"det-job-a ({first})", "42"]
        assert running[6:] == ["2/2", "STATE_SCHEDULED", "admin"]
        waiting = [r[1] for r in rows if r[7] == "STATE_QUEUED"]
        assert sorted(waiting) == sorted([f"experiment-{second}", f"experiment-{third}"])
        last = waiting[-1].removeprefix("experiment-")
        assert _jobs(det)[waiting[-1]][6] == "0/2"

        assert det.run("experiment", "set", "priority", last, "10").stdout.strip() == (
            f"Set `priority` of experiment {last} to 10")
        wait_for(lambda: [r[1] for r in det.rows("job", "list") if r[7] == "STATE_QUEUED"][0]
                 == f"experiment-{last}", 30, "the raised experiment to lead the queue")
        assert _jobs(det)[f"experiment-{last}"][4] == "10"
        assert yaml.safe_load(det.run("experiment", "config", last).stdout)["resources"][
            "priority"] == 10
        other = waiting[0]
        det.run("job", "update", other, "--priority", "5")
        wait_for(lambda: [r[1] for r in det.rows("job", "list") if r[7] == "STATE_QUEUED"][0]
                 == other, 30, "`det job update` to reorder the queue")
        assert det.run("experiment", "set", "max-slots", last, "4").stdout.strip() == (
            f"Set `max_slots` of experiment {last} to 4")
        assert det.run("experiment", "set", "weight", last, "2").stdout.strip() == (
            f"Set `weight` of experiment {last} to 2.0")
        bad = det.run("experiment", "set", "priority", last, "0", check=False)
        assert bad.returncode != 0 and "resources.priority" in bad.stdout + bad.stderr
    finally:
        for experiment in (first, second, third):
            det.run("experiment", "kill", experiment, check=False)
    for experiment in (first, second, third):
        det.run("experiment", "wait", "--polling-interval", "1", experiment, check=False)


def test_workspaces_projects_and_templates(det: Det, tmp_path: Path) -> None:
    """`det workspace|project|template ...` and `det experiment create --template
    --project_id`, with Determined's columns."""
    out = det.run("workspace", "list").stdout
    assert header(out)[:3] == ["ID", "Name", "# Projects"]
    assert next(r for r in table_rows(out) if r[0] == "1")[:2] == ["1", "Uncategorized"]
    described = det.rows("workspace", "describe", "Uncategorized")
    assert described[0][:2] == ["1", "Uncategorized"]
    projects = det.run("project", "list", "Uncategorized").stdout
    assert header(projects) == ["ID", "Key", "Name", "Description", "# Experiments",
                                "# Active Experiments"]
    assert table_rows(projects)[0][:3] == ["1", "UNC", "Uncategorized"]

    det.run("workspace", "create", "det-team")
    made = det.rows("project", "create", "det-team", "vision", "--description", "cats")
    project_id = made[0][0]
    assert made[0][2:4] == ["vision", "cats"]
    assert [r[2] for r in det.rows("project", "list", "det-team")] == ["vision"]
    duplicate = det.run("workspace", "create", "det-team", check=False)
    assert duplicate.returncode != 0 and "already exists" in duplicate.stdout + duplicate.stderr

    template = tmp_path / "template.yaml"
    template.write_text(yaml.safe_dump({
        "description": "from a template",
        "searcher": {"name": "single", "metric": "validation_loss",
                     "max_length": {"batches": 30}},
        "resources": {"priority": 30}}))
    assert "Set template det-tpl" in det.run("template", "set", "det-tpl", str(template)).stdout
    assert ["det-tpl", "Uncategorized"] in det.rows("template", "list")
    assert yaml.safe_load(det.run("template", "describe", "det-tpl").stdout)["resources"] == {
        "priority": 30}

    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    del config["searcher"], config["description"]  # the template brings them
    config["name"] = "det-templated"
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump(config))
    experiment = _created(det.run("experiment", "create", str(partial), str(DIGITS),
                                  "--template", "det-tpl", "--project_id", project_id).stdout)
    merged = yaml.safe_load(det.run("experiment", "config", experiment).stdout)
    assert merged["description"] == "from a template"
    assert merged["searcher"]["max_length"] == {"batches": 30}
    assert merged["resources"]["priority"] == 30
    det.run("experiment", "wait", "--polling-interval", "1", experiment)
    described = det.run("project", "describe", "det-team", "vision").stdout
    assert f"{experiment} | admin" in re.sub(r" +", " ", described)
    det.run("experiment", "move", experiment, "Uncategorized", "Uncategorized")
    assert det.rows("project", "describe", "det-team", "vision")[0][4] == "0"

    config["workspace"], config["project"] = "det-team", "no-such-project"
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(config))
    refused = det.run("experiment", "create", str(wrong), str(DIGITS), "--template", "det-tpl",
                      check=False)
    assert refused.returncode != 0 and "no-such-project" in refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr

    assert "Removed template det-tpl" in det.run("template", "remove", "det-tpl").stdout
    assert "det-tpl" not in [r[0] for r in det.rows("template", "list")]


@pytest.mark.parametrize(("command", "feature"), [
    (("config-policies", "describe", "experiment"), "config policies are not served by Epochal"),
])
def test_features_epochal_does_not_serve_say_so(
    det: Det, command: tuple[str, ...], feature: str
) -> None:
    result = det.run(*command, check=False)
    assert result.returncode != 0
    assert feature in result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "Not Found" not in result.stderr


def test_link_with_agent_user_sets_who_a_users_runs_are(det: Det, cluster: Cluster) -> None:
    """`det user link-with-agent-user`: kept, shown, and never root."""
    name = f"linked-{uuid.uuid4().hex[:6]}"
    det.run("user", "create", name, "--password", "A-long-passw0rd")
    link = ("--agent-uid", "1234", "--agent-gid", "1235", "--agent-user", "alice",
            "--agent-group", "team")
    det.run("user", "link-with-agent-user", name, *link)
    [user] = [u for u in cluster.get("/users", limit=1000)["users"] if u["username"] == name]
    assert user["agentUserGroup"] == {"agentUid": 1234, "agentGid": 1235,
                                      "agentUser": "alice", "agentGroup": "team"}
    root = det.run("user", "link-with-agent-user", name, "--agent-uid", "0", "--agent-gid", "0",
                   "--agent-user", "root", "--agent-group", "root", check=False)
    assert root.returncode != 0 and "agentUid" in root.stdout + root.stderr
    assert "Traceback" not in root.stderr


def _digits_config(tmp_path: Path, name: str, batches: int) -> Path:
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["name"] = name
    config["searcher"]["max_length"] = {"batches": batches}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_continue_trains_the_trial_on_from_its_latest_checkpoint(
    det: Det, tmp_path: Path
) -> None:
    """`det experiment continue ID --config searcher.max_length.batches=N`: same experiment,
    same trial, resumed from its checkpoint at the old length."""
    experiment = _created(det.run("experiment", "create",
                                  str(_digits_config(tmp_path, "det-continue", 100)),
                                  str(DIGITS)).stdout)
    det.run("experiment", "wait", "--polling-interval", "1", experiment)
    trial, _ = _trial_state(det, experiment)
    assert det.run("experiment", "continue", experiment, "--config",
                   "searcher.max_length.batches=150").stdout.strip() == (
        f"Continued experiment {experiment}")
    det.run("experiment", "wait", "--polling-interval", "1", experiment)
    (row,) = det.rows("experiment", "list-trials", experiment)
    assert (row[0], row[1], row[-1]) == (trial, "COMPLETED", "150")
    logs = det.run("trial", "logs", trial).stdout
    assert re.search(r"resumed from checkpoint \S+ at batch 100", logs), logs
    assert _experiment_state(det, experiment) == "COMPLETED"

    running = det.run("experiment", "continue", "999999", check=False)
    assert running.returncode != 0 and "not found" in running.stdout + running.stderr
    other = det.run("experiment", "continue", experiment, "--config", "searcher.name=grid",
                    check=False)
    assert other.returncode != 0 and "searcher.name" in other.stdout + other.stderr


def test_epochal_cli_workspaces_templates_scheduling_and_fork(
    cluster: Cluster, det: Det, tmp_path: Path
) -> None:
    """The same features through `epochal`: workspace/project/template commands,
    `experiment create --template`, `experiment set priority` and `experiment fork`."""
    cluster.run("workspace", "create", "epochal-team")
    cluster.run("project", "create", "epochal-team", "nlp", "--key", "NLP")
    projects = cluster.json("project", "list", "epochal-team")["projects"]
    assert [(p["name"], p["key"]) for p in projects] == [("nlp", "NLP")]
    assert "Uncategorized" in cluster.run("workspace", "list").stdout

    template = tmp_path / "tpl.yaml"
    template.write_text(yaml.safe_dump({"searcher": {
        "name": "single", "metric": "validation_loss", "max_length": {"batches": 20}}}))
    assert "Set template epochal-tpl" in cluster.run("template", "set", "epochal-tpl",
                                                     str(template)).stdout
    assert "max_length" in cluster.run("template", "describe", "epochal-tpl").stdout
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    del config["searcher"]
    config["name"] = "epochal-templated"
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump(config))
    experiment = str(cluster.json("experiment", "create", str(partial), str(DIGITS),
                                  "--template", "epochal-tpl",
                                  "--project", str(projects[0]["id"]))["experiment"]["id"])
    det.run("experiment", "wait", "--polling-interval", "1", experiment)
    described = cluster.json("experiment", "describe", experiment)["experiment"]
    assert described["projectId"] == projects[0]["id"]
    assert described["config"]["searcher"]["max_length"] == {"batches": 20}
    assert cluster.run("experiment", "set", "priority", experiment, "12").stdout.strip() == (
        f"Set priority of experiment {experiment} to 12")
    assert yaml.safe_load(det.run("experiment", "config", experiment).stdout)["resources"][
        "priority"] == 12

    forked = cluster.run("experiment", "fork", experiment).stdout
    child = re.search(r"Created experiment (\d+) \(forked from (\d+)\)", forked)
    assert child and child.group(2) == experiment, forked
    det.run("experiment", "wait", "--polling-interval", "1", child.group(1))
    listed = {r[0]: r for r in det.rows("experiment", "list")}
    assert listed[child.group(1)][3] == experiment  # Determined's "Parent ID"
    assert listed[child.group(1)][4] == "COMPLETED"
    cluster.run("template", "remove", "epochal-tpl")
    assert "epochal-tpl" not in cluster.run("template", "list").stdout


def test_model_registry_with_det_and_epochal(
    det: Det, cluster: Cluster, finished: Finished
) -> None:
    """`det model create/list/describe/register-version/list-versions/delete` with Determined's
    columns, `epochal model ...` over the same registry, and a registered checkpoint keeping its
    experiment from deletion."""
    checkpoints = det.rows("experiment", "list-checkpoints", str(finished.experiment_id))
    (uuid,) = [r[4] for r in checkpoints if r[2] == "COMPLETED"]
    created = det.run("model", "create", "det-digits", "--description", "digits classifier")
    assert header(created.stdout) == ["ID", "Name", "Description", "Workspace ID",
                                      "Creation Time", "Last Updated Time", "Metadata"]
    assert table_rows(created.stdout)[0][1:4] == ["det-digits", "digits classifier", "1"]
    twice = det.run("model", "create", "det-digits", check=False)
    assert twice.returncode != 0 and "already exists" in twice.stdout + twice.stderr
    assert "Traceback" not in twice.stderr
    listed = det.run("model", "list").stdout
    assert header(listed) == ["ID", "Name", "Workspace ID", "Creation Time",
                              "Last Updated Time", "Metadata"]
    assert "det-digits" in [r[1] for r in table_rows(listed)]

    registered = det.run("model", "register-version", "det-digits", uuid).stdout
    versions = registered.split("\n\n")[-1]
    assert header(versions) == ["Version #", "Trial ID", "Batch #", "Checkpoint UUID",
                                "Validation Metrics", "Metadata"]
    assert table_rows(versions)[0][:4] == ["1", str(finished.trial_id), "300", uuid]
    assert table_rows(det.run("model", "list-versions", "det-digits").stdout.split("\n\n")[-1])[
        0][:4] == ["1", str(finished.trial_id), "300", uuid]
    described = det.run("model", "describe", "det-digits").stdout
    assert table_rows(described.split("\n\n")[-1])[0][3] == uuid

    # The same registry through `epochal`.
    assert "det-digits" in cluster.run("model", "list").stdout
    again = cluster.json("model", "register-version", "det-digits", uuid, "--comment", "twice")
    assert (again["version"], again["comment"]) == (2, "twice")
    shown = cluster.json("model", "describe", "det-digits")
    assert [v["version"] for v in shown["modelVersions"]] == [1, 2]
    assert shown["modelVersions"][0]["checkpoint"]["uuid"] == uuid
    cluster.run("model", "delete-version", "det-digits", "2")

    kept = det.run("experiment", "delete", "--yes", str(finished.experiment_id), check=False)
    assert kept.returncode != 0 and "det-digits:1" in kept.stdout + kept.stderr
    assert "Traceback" not in kept.stderr
    det.run("workspace", "create", "det-models")
    det.run("model", "move", "det-digits", "-w", "det-models")
    assert [r[1] for r in det.rows("model", "list", "-w", "det-models")] == ["det-digits"]
    det.run("model", "delete", "det-digits")
    assert "det-digits" not in [r[1] for r in det.rows("model", "list")]
