"""Issue 37 items 15 and 16: the CLI's tables at 80 and 100 columns: no line longer than the
terminal, no row wrapped onto a second line, cells cut short ending in "…"; `trial describe`'s
hyperparameters one a line; DELETED checkpoints hidden from the table unless asked for;
`experiment describe`'s best trials shown with the value they were ranked by."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

import cli.client
from deploy.console import app
from tests.fakes.cli_master import FakeMaster, checkpoint, experiment, trial

WIDTHS = [80, 100]
UUID = "3f2a9c1e-7b4d-4e2a-9c1e-7b4d4e2a9c{:02d}"
LONG_NAME = "resnet50-imagenet-adaptive-asha-with-mixed-precision-and-a-very-long-description"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    master = FakeMaster()
    monkeypatch.setattr(cli.client, "transport_factory", master.transport)
    return master


def run(width: int, *args: str) -> str:
    result = CliRunner().invoke(app, list(args),
                                env={"COLUMNS": str(width), "EPOCHAL_MASTER": None})
    assert result.exit_code == 0, result.output
    return result.stdout


def assert_fits(out: str, width: int) -> list[str]:
    lines = out.splitlines()
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, f"lines over {width} columns: {too_long}"
    assert not [line for line in lines if line != line.rstrip()], "rows padded with spaces"
    return lines


def rows_starting(lines: list[str], prefixes: list[str]) -> list[str]:
    return [line for line in lines if any(line.startswith(p) for p in prefixes)]


def truncated_words(lines: list[str]) -> list[str]:
    return [word for line in lines for word in line.split() if "…" in word]


def many_checkpoints(deleted: int, kept: int) -> list[dict[str, Any]]:
    found = []
    for i in range(deleted + kept):
        c = checkpoint(UUID.format(i), 12, 100 * (i + 1), 0.3 - i / 1000)
        if i < deleted:
            c["state"] = "STATE_DELETED"
        found.append(c)
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_experiment_list_cuts_long_names_short_and_wraps_no_row(
        fake: FakeMaster, width: int) -> None:
    experiments = [experiment(id=i, name=f"{LONG_NAME}-{i}") for i in range(1, 6)]
    fake.on("GET", "/experiments", {"experiments": experiments,
                                    "pagination": {"offset": 0, "limit": 500, "total": 5}})

    lines = assert_fits(run(width, "experiment", "list"), width)

    rows = rows_starting(lines, [str(i) + " " for i in range(1, 6)])
    assert len(rows) == 5  # one line a row
    assert all(row.split()[2] == "COMPLETED" for row in rows)  # states stay whole
    names = [row.split()[1] for row in rows]
    assert all(name.endswith("…") and LONG_NAME.startswith(name[:-1]) for name in names)


@pytest.mark.parametrize("width", WIDTHS)
def test_trial_describe_fits_and_lists_hyperparameters_one_a_line(
        fake: FakeMaster, width: int) -> None:
    t = trial(12, 0.3, 0.25)
    t["hparams"] = {"activation": "tanh", "batch_size": 32, "layers": [64, 64],
                    "optimizer": {"name": "adam", "beta1": 0.9}, "lr": 0.001}
    fake.on("GET", "/trials/12", {"trial": t})
    fake.on("GET", "/trials/12/checkpoints", {"checkpoints": many_checkpoints(3, 4)})
    fake.on("GET", "/experiments/4", {"experiment": experiment()})

    out = run(width, "trial", "describe", "12")

    lines = assert_fits(out, width)
    assert "\\x0a" not in out
    start = next(i for i, line in enumerate(lines) if line.startswith("Hyperparameters"))
    shown = [line.replace("Hyperparameters", "").strip() for line in lines[start:start + 5]]
    assert shown == ["activation=tanh", "batch_size=32", "layers=[64, 64]", "lr=0.001",
                     "optimizer.beta1=0.9"]
    assert lines[start + 5].strip() == "optimizer.name=adam"
    rows = rows_starting(lines, ["3f2a9c1e-"])
    assert [row.split()[0] for row in rows] == [UUID.format(i) for i in range(3, 7)]  # whole
    assert all(row.split()[2] == "COMPLETED" for row in rows)
    assert "3 deleted checkpoints not shown (`--json` lists them)." in out
    if width == 80:  # 36 columns of uuid: the time and the metric give way
        assert truncated_words(lines)


@pytest.mark.parametrize("width", WIDTHS)
def test_checkpoint_list_hides_deleted_ones_unless_all(fake: FakeMaster, width: int) -> None:
    checkpoints = many_checkpoints(5, 2)
    fake.on("GET", "/experiments/4/checkpoints", {"checkpoints": checkpoints})
    fake.on("GET", "/experiments/4", {"experiment": experiment()})

    lines = assert_fits(run(width, "checkpoint", "list", "4"), width)

    rows = rows_starting(lines, ["3f2a9c1e-"])
    assert [row.split()[0] for row in rows] == [UUID.format(5), UUID.format(6)]
    assert lines[-1] == "5 DELETED checkpoints not shown (--all shows them)."
    if width == 80:
        assert all(word.endswith("…") for word in truncated_words(lines))
        assert truncated_words(lines)

    every = assert_fits(run(width, "checkpoint", "list", "4", "--all"), width)
    assert len(rows_starting(every, ["3f2a9c1e-"])) == 7
    assert sum("DELETED" in row for row in every) == 5
    assert not any("not shown" in line for line in every)

    # Scripts get the server's answer whole (tests/e2e reads DELETED ones through it).
    answer = json.loads(run(width, "checkpoint", "list", "4", "--json"))
    assert [c["uuid"] for c in answer["checkpoints"]] == [c["uuid"] for c in checkpoints]
    assert sum(c["state"] == "STATE_DELETED" for c in answer["checkpoints"]) == 5


@pytest.mark.parametrize("width", WIDTHS)
def test_cmd_list_keeps_ids_whole_and_cuts_descriptions(fake: FakeMaster, width: int) -> None:
    fake.on("GET", "/me", {"user": {"username": "ada"}})
    commands = [{"id": UUID.format(i), "username": "ada", "description": f"Command ({LONG_NAME})",
                 "state": "STATE_RUNNING", "exitStatus": None, "resourcePool": "default",
                 "startTime": "2025-01-02T10:00:00+00:00"} for i in range(3)]
    fake.on("GET", "/commands", {"commands": commands})

    lines = assert_fits(run(width, "cmd", "list"), width)

    rows = rows_starting(lines, ["3f2a9c1e-"])
    assert [row.split()[0] for row in rows] == [UUID.format(i) for i in range(3)]
    assert all("RUNNING" in row for row in rows)
    assert all(any(w.endswith("…") for w in row.split()) for row in rows)


@pytest.mark.parametrize("width", WIDTHS)
def test_job_list_wraps_no_row(fake: FakeMaster, width: int) -> None:
    jobs = [{"jobId": f"experiment-{i}-{LONG_NAME}", "resourcePool": "default-pool-of-gpus",
             "priority": 42, "allocatedSlots": 1, "requestedSlots": 2, "runningTrials": 1,
             "queuedTrials": 3, "summary": {"jobsAhead": i, "state": "STATE_QUEUED"}}
            for i in range(4)]
    fake.on("GET", "/job-queues", {"jobs": jobs})

    lines = assert_fits(run(width, "job", "list"), width)

    rows = [line for line in lines if line[:1].isdigit()]
    assert len(rows) == 4
    assert all("QUEUED" in row for row in rows)
    assert all(word.endswith("…") for word in truncated_words(lines))


@pytest.mark.parametrize("width", WIDTHS)
def test_experiment_describe_ranks_and_shows_the_best_value(
        fake: FakeMaster, width: int) -> None:
    """`The 20 best by validation_loss`: the column shows each trial's best value (the one the
    master sorted by), not its latest."""
    shown = [trial(100 + i, 0.9, 0.1 + i * 0.01) for i in range(20)]
    fake.on("GET", "/experiments/4", {"experiment": experiment(
        numTrials=50, bestTrialId=100, bestValidation=0.1), "config": {}})
    fake.on("GET", "/experiments/4/trials", {"trials": shown, "pagination": {"total": 50}})
    fake.on("GET", "/trials/100/checkpoints", {"checkpoints": [
        checkpoint("c-100", 100, 300, 0.1)]})

    out = run(width, "experiment", "describe", "4")

    lines = assert_fits(out, width)
    header = next(line for line in lines if line.startswith("Trial "))
    assert "best" in header.split()
    rows = [line.replace(" *", "").split() for line in lines
            if line[:3].isdigit() and int(line[:3]) >= 100]
    assert [row[3] for row in rows] == [f"{0.1 + i * 0.01:.6g}" for i in range(20)]
    assert "0.9" not in [row[3] for row in rows]  # the latest values


def test_pipes_keep_full_rows(fake: FakeMaster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a terminal (and no COLUMNS), rows are as wide as they need for grep."""
    experiments = [experiment(id=1, name=LONG_NAME)]
    fake.on("GET", "/experiments", {"experiments": experiments,
                                    "pagination": {"offset": 0, "limit": 500, "total": 1}})
    monkeypatch.delenv("COLUMNS", raising=False)

    result = CliRunner().invoke(app, ["experiment", "list"], env={"EPOCHAL_MASTER": None})

    assert LONG_NAME in result.stdout and "…" not in result.stdout


def test_trial_describe_piped_pads_no_row(fake: FakeMaster,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Into a pipe (400 columns) the fields were padded to the widest value: 312 characters of
    hyperparameters joined into one escaped line."""
    t = trial(12, 0.3, 0.25)
    t["hparams"] = {f"hyperparameter_{i}": "x" * 20 for i in range(12)}
    fake.on("GET", "/trials/12", {"trial": t})
    fake.on("GET", "/trials/12/checkpoints", {"checkpoints": many_checkpoints(0, 2)})
    fake.on("GET", "/experiments/4", {"experiment": experiment()})
    monkeypatch.delenv("COLUMNS", raising=False)

    result = CliRunner().invoke(app, ["trial", "describe", "12"], env={"EPOCHAL_MASTER": None})

    assert result.exit_code == 0, result.output
    lines = assert_fits(result.stdout, 100)
    assert sum("hyperparameter_" in line for line in lines) == 12


@pytest.mark.parametrize("width", WIDTHS)
def test_job_list_shows_a_tasks_own_slots_and_what_each_job_waits_for(
        fake: FakeMaster, width: int) -> None:
    """Issue 37 item 6: a task's slots are held/needed with no trial counts ("-"), and a
    waiting job's reason is in its row."""
    jobs = [
        {"jobId": "experiment-2", "type": "TYPE_EXPERIMENT", "entityId": "2",
         "resourcePool": "default", "priority": 42, "allocatedSlots": 1, "requestedSlots": 2,
         "runningTrials": 1, "queuedTrials": 1, "summary": {"jobsAhead": 0,
                                                            "state": "STATE_SCHEDULED"},
         "waiting": "behind job experiment-2"},
        {"jobId": UUID.format(1), "type": "TYPE_NOTEBOOK", "entityId": UUID.format(1),
         "resourcePool": "default", "priority": 42, "allocatedSlots": 0, "requestedSlots": 1,
         "runningTrials": None, "queuedTrials": None,
         "summary": {"jobsAhead": 1, "state": "STATE_QUEUED"},
         "waiting": "1 slot; 0 free in pool default"}]
    fake.on("GET", "/job-queues", {"jobs": jobs})

    lines = assert_fits(run(width, "job", "list"), width)

    rows = [line for line in lines if line[:1].isdigit()]
    assert [row.split()[:2] for row in rows] == [["0", "experiment-2"], ["1", "notebook"]]
    for row, state, counts in ((rows[0], "SCHEDULED", ["1/2", "1/1"]),
                               (rows[1], "QUEUED", ["0/1", "-"])):  # slots, trials
        words = row.split()
        assert words[words.index(state) + 1:words.index(state) + 3] == counts
    assert "1 slot; 0" in rows[1] and "behind job" in rows[0]


def test_job_list_into_a_pipe_keeps_the_reason_whole(
        fake: FakeMaster, monkeypatch: pytest.MonkeyPatch) -> None:
    reason = ("no agent has 6 slots, nor can pool default's agents (2 x 2 slots) make them up:"
              " it waits for agents to join")
    fake.on("GET", "/job-queues", {"jobs": [
        {"jobId": "experiment-9", "type": "TYPE_EXPERIMENT", "resourcePool": "default",
         "priority": 42, "allocatedSlots": 0, "requestedSlots": 6, "runningTrials": 0,
         "queuedTrials": 1, "summary": {"jobsAhead": 0, "state": "STATE_QUEUED"},
         "waiting": reason}]})
    monkeypatch.delenv("COLUMNS", raising=False)

    result = CliRunner().invoke(app, ["job", "list"], env={"EPOCHAL_MASTER": None})

    assert reason in result.stdout


@pytest.mark.parametrize("width", WIDTHS)
def test_slot_list_names_a_trial_and_a_notebook(fake: FakeMaster, width: int) -> None:
    """A notebook's slot names the notebook (it was "Trial 0"), a trial's the trial and its
    experiment, a free slot "free"."""
    notebook = UUID.format(7)
    slots = [
        {"id": "0", "type": "TYPE_CPU", "device": {"brand": "cpu"}, "enabled": True,
         "allocationId": "3.5.1", "trialId": 5, "experimentId": 3, "taskId": "3.5",
         "taskType": "TASK_TYPE_TRIAL", "taskName": "Trial 5 (Experiment 3)"},
        {"id": "1", "type": "TYPE_CPU", "device": {"brand": "cpu"}, "enabled": True,
         "allocationId": f"{notebook}.1", "trialId": None, "experimentId": None,
         "taskId": notebook, "taskType": "TASK_TYPE_NOTEBOOK",
         "taskName": "JupyterLab (3f2a9c1e)"},
        {"id": "2", "type": "TYPE_CPU", "device": {"brand": "cpu"}, "enabled": True,
         "allocationId": None, "trialId": None, "experimentId": None, "taskId": None,
         "taskType": None, "taskName": None}]
    fake.on("GET", "/agents", {"agents": [{"id": "a1"}]})
    fake.on("GET", "/agents/a1/slots", {"slots": slots})

    lines = assert_fits(run(width, "slot", "list"), width)

    rows = [line for line in lines if line.startswith("a1")]
    assert len(rows) == 3
    assert "Trial 5 (Experiment 3)" in rows[0]
    assert " notebook " in rows[1] and "Trial" not in rows[1]
    assert rows[2].endswith("free")
    whole = CliRunner().invoke(app, ["slot", "list"], env={"EPOCHAL_MASTER": None,
                                                           "COLUMNS": "200"}).stdout
    assert f"notebook {notebook}: JupyterLab (3f2a9c1e)" in whole
