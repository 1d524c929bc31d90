"""`epochal experiment list/describe/logs/follow/pause/...` against a fake master."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.client
import cli.experiment_follow
from cli.main import app
from tests.fakes.cli_master import (
    CHECKPOINTS,
    TRIALS,
    FakeMaster,
    checkpoint,
    error,
    experiment,
    log,
    ndjson,
    trial,
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeMaster:
    master = FakeMaster()
    monkeypatch.setattr(cli.client, "transport_factory", master.transport)
    monkeypatch.setattr(cli.experiment_follow, "POLL_SECONDS", 0)
    return master


def serve_experiment(fake: FakeMaster, *states: str) -> None:
    fake.on("GET", "/experiments/4", *({"experiment": experiment(s), "config": {}} for s in states))
    fake.on("GET", "/experiments/4/trials", {"trials": TRIALS, "pagination": {"total": 2}})
    serve_checkpoints(fake)


def serve_checkpoints(fake: FakeMaster, *answers: object) -> None:
    """Each trial's own checkpoints (describe reads the best trial's)."""
    for tid in (11, 12):
        own = [c for c in CHECKPOINTS if c["training"]["trialId"] == tid]
        fake.on("GET", f"/trials/{tid}/checkpoints", *(answers or [{"checkpoints": own}]))


def run(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "220", "EPOCHAL_MASTER": None})


# -- list -------------------------------------------------------------------------------------


def test_list_renders_a_table_without_state_prefix(fake: FakeMaster) -> None:
    fake.on(
        "GET",
        "/experiments",
        {
            "experiments": [experiment(), experiment("STATE_ACTIVE", id=5, name="other")],
            "pagination": {"offset": 0, "limit": 500, "total": 2},
        },
    )

    result = run("experiment", "list")

    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[2][:7] == ["4", "digits-random", "COMPLETED", "random", "100%", "2", "0.25"]
    assert rows[3][:3] == ["5", "other", "ACTIVE"]
    assert "STATE_" not in result.stdout
    request = fake.sent("GET", "/experiments")[0]
    assert request.url.params["archived"] == "false"


def test_list_follows_pagination_and_all_includes_archived(fake: FakeMaster) -> None:
    first = [experiment(id=i, name=f"e{i}") for i in range(1, 501)]
    fake.on(
        "GET",
        "/experiments",
        {"experiments": first, "pagination": {"offset": 0, "limit": 500, "total": 501}},
        {
            "experiments": [experiment(id=501, name="last", archived=True)],
            "pagination": {"offset": 500, "limit": 500, "total": 501},
        },
    )

    result = run("experiment", "list", "--all", "--json")

    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert len(answer["experiments"]) == 501
    offsets = [r.url.params["offset"] for r in fake.sent("GET", "/experiments")]
    assert offsets == ["0", "500"]
    assert "archived" not in fake.sent("GET", "/experiments")[0].url.params


def test_list_hides_the_best_column_when_the_server_leaves_it_out(fake: FakeMaster) -> None:
    fake.on("GET", "/experiments", {"experiments": [experiment(bestValidation=None)]})

    result = run("experiment", "list")

    assert result.stdout.splitlines()[0].split() == [
        "ID",
        "Name",
        "State",
        "Searcher",
        "Progress",
        "Trials",
        "Started",
        "Ended",
    ]


def test_list_empty(fake: FakeMaster) -> None:
    fake.on("GET", "/experiments", {"experiments": [], "pagination": {"total": 0}})

    result = run("experiment", "list")

    assert result.exit_code == 0
    assert "No experiments yet" in result.stdout


# -- describe ---------------------------------------------------------------------------------


def test_describe_shows_fields_trials_and_best_checkpoint(fake: FakeMaster) -> None:
    serve_experiment(fake, "STATE_COMPLETED")

    result = run("experiment", "describe", "4")

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "digits-random" in out
    assert "validation_loss (smaller is better)" in out
    assert "3m05s" in out
    lines = out.splitlines()
    row11 = next(line for line in lines if line.lstrip().startswith("11 "))
    assert row11.split()[:4] == ["11", "COMPLETED", "300", "0.5"]
    assert row11.split()[-1] == "0.11"  # only `lr` differs between the trials: its own column
    assert "same in every trial: activation=relu, optimizer.momentum=0.9" in out
    row12 = next(line for line in lines if line.lstrip().startswith("12 *"))
    assert "0.3" in row12
    # Best by the best validation (0.25 < 0.45), its best checkpoint by searcher metric.
    assert "Best trial: 12 (validation_loss=0.25, smaller is better), checkpoint c-12-200" in out


def test_describe_larger_is_better_picks_the_other_trial(fake: FakeMaster) -> None:
    fake.on(
        "GET",
        "/experiments/4",
        {"experiment": experiment(smallerIsBetter=False, bestTrialId=11), "config": {}},
    )
    fake.on("GET", "/experiments/4/trials", {"trials": TRIALS})
    serve_checkpoints(fake)

    result = run("experiment", "describe", "4")

    assert "Best trial: 11 (validation_loss=0.45, larger is better), checkpoint c-11-300" in (
        result.stdout
    )


def test_describe_falls_back_to_the_trials_latest_checkpoint(fake: FakeMaster) -> None:
    fake.on("GET", "/experiments/4", {"experiment": experiment(), "config": {}})
    fake.on("GET", "/experiments/4/trials", {"trials": TRIALS})
    serve_checkpoints(fake, error(404, "not here"))

    result = run("experiment", "describe", "4")

    assert result.exit_code == 0, result.output
    assert "checkpoint latest-12" in result.stdout


def test_describe_json_is_the_servers_json(fake: FakeMaster) -> None:
    serve_experiment(fake, "STATE_COMPLETED")

    result = run("experiment", "describe", "4", "--json")

    answer = json.loads(result.stdout)
    assert answer["experiment"] == experiment()
    assert answer["trials"] == TRIALS
    assert answer["config"] == {}


def test_describe_summarises_a_large_experiment(fake: FakeMaster) -> None:
    """10,000 trials: the best TRIALS_SHOWN, asked of the master sorted by the searcher metric
    (larger is better here), a count per state; the best trial comes from the master's pick."""
    shown = [trial(100 + i, 0.9 - i * 0.01, 0.9 - i * 0.01) for i in range(20)]
    fake.on("GET", "/experiments/4", {"experiment": experiment(
        numTrials=10_000, smallerIsBetter=False, bestTrialId=100, bestValidation=0.9,
        trialStates={"STATE_COMPLETED": 9_990, "STATE_ERROR": 10}), "config": {}})
    fake.on("GET", "/experiments/4/trials", {"trials": shown,
                                              "pagination": {"total": 10_000}})
    fake.on("GET", "/trials/100/checkpoints", {"checkpoints": [
        checkpoint("c-100", 100, 300, 0.9)]})

    result = run("experiment", "describe", "4")

    assert result.exit_code == 0, result.output
    (asked,) = fake.sent("GET", "/experiments/4/trials")
    assert dict(asked.url.params) == {"limit": "20", "orderBy": "ORDER_BY_DESC",
                                      "sortBy": "SORT_BY_BEST_VALIDATION_METRIC"}
    out = result.stdout
    assert "10000 (9990 COMPLETED, 10 ERROR)" in out
    rows = [ln.split()[0] for ln in out.splitlines() if ln.lstrip()[:1].isdigit()
            and ln.split()[0].isdigit() and int(ln.split()[0]) >= 100]
    assert rows == [str(100 + i) for i in range(20)]  # best first, as the master ordered them
    assert "The 20 best of 10000 trials by validation_loss; `--all` lists every trial." in out
    assert "Best trial: 100 (validation_loss=0.9, larger is better), checkpoint c-100" in out
    assert len(out.splitlines()) < 60

    fake.on("GET", "/experiments/4/trials", {"trials": shown, "pagination": {"total": 20}})
    everything = run("experiment", "describe", "4", "--all")
    assert everything.exit_code == 0, everything.output
    assert fake.sent("GET", "/experiments/4/trials")[-1].url.params["limit"] == "500"


def test_describe_unknown_experiment(fake: FakeMaster) -> None:
    fake.on("GET", "/experiments/99", error(404, "experiment 99 not found"))

    result = run("experiment", "describe", "99")

    assert result.exit_code == 1
    assert result.stderr == "error: experiment 99 not found\n"
    assert result.stdout == ""


# -- logs and follow --------------------------------------------------------------------------


def test_logs_are_prefixed_with_the_trial(fake: FakeMaster) -> None:
    fake.on(
        "GET",
        "/experiments/4/logs",
        ndjson([log(1, 11, "epoch 1\n"), log(2, 12, "two\nlines\n"), log(3, 11, "[x] done")]),
    )

    result = run("experiment", "logs", "4", "-f")

    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "[trial 11] epoch 1\n[trial 12] two\n[trial 12] lines\n[trial 11] [x] done\n"
    )
    assert fake.sent("GET", "/experiments/4/logs")[0].url.params["follow"] == "true"


@pytest.mark.parametrize(
    ("final", "code"),
    [("STATE_COMPLETED", 0), ("STATE_ERROR", 1), ("STATE_CANCELED", 3)],
)
def test_follow_exit_code_follows_the_final_state(fake: FakeMaster, final: str, code: int) -> None:
    serve_experiment(fake, "STATE_ACTIVE", "STATE_ACTIVE", "STATE_STOPPING_COMPLETED", final)
    fake.on("GET", "/experiments/4/logs", ndjson([log(1, 11, "hello"), log(2, 12, "world")]))

    result = run("experiment", "follow", "4")

    assert result.exit_code == code, result.output
    out = result.stdout
    assert "[trial 11] hello\n[trial 12] world\n" in out
    assert f"Experiment 4 {final.removeprefix('STATE_')} after 3m05s" in out
    assert "Best trial: 12" in out
    assert len(fake.sent("GET", "/experiments/4")) >= 4  # polled until terminal


def test_create_follow_streams_then_shows_results(fake: FakeMaster, tmp_path) -> None:
    (tmp_path / "train.py").write_text("")
    config = tmp_path / "c.yaml"
    config.write_text(
        "entrypoint: python3 train.py\nsearcher:\n  name: single\n  metric: validation_loss\n"
        "  max_length: {batches: 10}\n"
    )
    fake.on("POST", "/experiments", {"experiment": experiment("STATE_ACTIVE"), "warnings": []})
    serve_experiment(fake, "STATE_ACTIVE", "STATE_CANCELED")
    fake.on("GET", "/experiments/4/logs", ndjson([log(1, 11, "hi")]))

    result = run("experiment", "create", str(config), str(tmp_path), "--follow")

    assert result.exit_code == 3, result.output
    assert result.stdout.startswith("Created experiment 4\n[trial 11] hi\n")
    assert "Experiment 4 CANCELED" in result.stdout


def test_follow_json_keeps_stdout_for_json(fake: FakeMaster) -> None:
    serve_experiment(fake, "STATE_COMPLETED")
    fake.on("GET", "/experiments/4/logs", ndjson([log(1, 11, "hello")]))

    result = run("experiment", "follow", "4", "--json")

    assert result.exit_code == 0
    assert json.loads(result.stdout)["experiment"]["state"] == "STATE_COMPLETED"
    assert "[trial 11] hello" in result.stderr


def test_follow_unknown_experiment_fails_before_streaming(fake: FakeMaster) -> None:
    fake.on("GET", "/experiments/4", error(404, "experiment 4 not found"))

    result = run("experiment", "follow", "4")

    assert result.exit_code == 1
    assert result.stderr == "error: experiment 4 not found\n"
    assert fake.sent("GET", "/experiments/4/logs") == []


def test_ctrl_c_stops_following_not_the_experiment(
    fake: FakeMaster, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_experiment(fake, "STATE_ACTIVE")
    fake.on("GET", "/experiments/4/logs", ndjson([]))

    def interrupted(client, experiment_id):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.experiment_follow, "wait_until_terminal", interrupted)

    result = run("-m", "http://10.0.0.5:8080", "experiment", "follow", "4")

    assert result.exit_code == 130
    assert "experiment 4 keeps running" in result.stderr
    assert "epochal -m http://10.0.0.5:8080 experiment follow 4" in result.stderr
    assert not [r for r in fake.requests if r.method != "GET"]  # nothing killed or canceled


def test_follow_rides_out_a_master_restart(fake: FakeMaster) -> None:
    import httpx

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    fake.on(
        "GET",
        "/experiments/4",
        {"experiment": experiment("STATE_ACTIVE")},
        down,
        down,
        {"experiment": experiment("STATE_COMPLETED")},
    )
    fake.on("GET", "/experiments/4/trials", {"trials": TRIALS})
    serve_checkpoints(fake)
    fake.on("GET", "/experiments/4/logs", ndjson([]))

    result = run("experiment", "follow", "4")

    assert result.exit_code == 0, result.output
    assert "cannot reach the master" in result.stderr and "still trying" in result.stderr


def test_follow_reconnects_when_the_log_stream_ends_early_without_repeating_lines(
    fake: FakeMaster,
) -> None:
    fake.on(
        "GET",
        "/experiments/4/logs",
        ndjson([log(1, 11, "one")]),
        ndjson([log(1, 11, "one"), log(2, 11, "two")]),
    )

    def state(request):
        done = len(fake.sent("GET", "/experiments/4/logs")) >= 2
        return {"experiment": experiment("STATE_COMPLETED" if done else "STATE_ACTIVE")}

    fake.on("GET", "/experiments/4", state)
    fake.on("GET", "/experiments/4/trials", {"trials": TRIALS})
    serve_checkpoints(fake)

    result = run("experiment", "follow", "4")

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("[trial 11] one\n[trial 11] two\nExperiment 4 COMPLETED")


# -- actions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "said"),
    [("pause", "Paused"), ("activate", "Activated"), ("cancel", "Canceling"), ("kill", "Killing"),
     ("archive", "Archived"), ("unarchive", "Unarchived")],
)
def test_actions_post_to_the_experiment(fake: FakeMaster, verb: str, said: str) -> None:
    fake.on("POST", f"/experiments/4/{verb}", {})

    result = run("experiment", verb, "4")

    assert result.exit_code == 0, result.output
    assert result.stdout == f"{said} experiment 4\n"
    assert len(fake.sent("POST", f"/experiments/4/{verb}")) == 1


def test_action_in_the_wrong_state(fake: FakeMaster) -> None:
    fake.on(
        "POST",
        "/experiments/4/pause",
        error(409, "experiment 4 is COMPLETED: it can no longer pause"),
    )

    result = run("experiment", "pause", "4")

    assert result.exit_code == 1
    assert result.stderr == "error: experiment 4 is COMPLETED: it can no longer pause\n"


def test_describe_shows_where_each_trial_stands_in_an_asha_search(fake: FakeMaster) -> None:
    trials = [
        {**TRIALS[0], "rung": 0, "searcherStatus": "stopped early at rung 0"},
        {**TRIALS[1], "rung": 2, "searcherStatus": "trained to the end"},
    ]
    fake.on("GET", "/experiments/4", {"experiment": experiment(), "config": {}})
    fake.on("GET", "/experiments/4/trials", {"trials": trials, "pagination": {"total": 2}})
    serve_checkpoints(fake)

    result = run("experiment", "describe", "4")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "Searcher" in next(line for line in lines if line.lstrip().startswith("Trial "))
    assert "stopped early at rung 0" in next(ln for ln in lines if ln.lstrip().startswith("11 "))
    assert "trained to the end" in next(ln for ln in lines if ln.lstrip().startswith("12 "))


# -- lifecycle: name, labels, delete, config, model definition ---------------------------------


def test_set_name_description_and_notes_patch_the_experiment(fake: FakeMaster) -> None:
    fake.on("PATCH", "/experiments/4", {"experiment": experiment(name="renamed")})

    assert run("experiment", "set", "name", "4", "renamed").stdout == (
        "Renamed experiment 4 to renamed\n")
    assert run("experiment", "set", "description", "4", "").exit_code == 0

    notes = CliRunner().invoke(app, ["experiment", "set", "notes", "4", "-"],
                               input="lr 0.1 diverged\n", env={"EPOCHAL_MASTER": None})
    assert notes.exit_code == 0, notes.output

    assert fake.body("PATCH", "/experiments/4", 0) == {"id": 4, "name": "renamed"}
    assert fake.body("PATCH", "/experiments/4", 1) == {"id": 4, "description": ""}
    assert fake.body("PATCH", "/experiments/4", 2) == {"id": 4, "notes": "lr 0.1 diverged\n"}


def test_labels_are_added_and_removed_from_the_current_ones(fake: FakeMaster) -> None:
    fake.on("GET", "/experiments/4", {"experiment": experiment(labels=["demo", "old"])})
    fake.on("PATCH", "/experiments/4", lambda request: {"experiment": experiment(
        labels=json.loads(request.content)["labels"])})

    added = run("experiment", "label", "add", "4", "new", "demo")
    removed = run("experiment", "label", "remove", "4", "old", "absent")

    assert added.stdout == "Labels of experiment 4: demo, new, old\n"
    assert fake.body("PATCH", "/experiments/4", 0)["labels"] == ["demo", "new", "old"]
    assert removed.stdout == "Labels of experiment 4: demo\n"
    assert fake.body("PATCH", "/experiments/4", 1)["labels"] == ["demo"]


def test_delete_asks_first_unless_yes(fake: FakeMaster) -> None:
    fake.on("DELETE", "/experiments/4", {})

    declined = CliRunner().invoke(app, ["experiment", "delete", "4"], input="n\n",
                                  env={"EPOCHAL_MASTER": None})
    assert declined.exit_code == 1 and "not deleted" in declined.stderr
    assert fake.sent("DELETE", "/experiments/4") == []

    confirmed = CliRunner().invoke(app, ["experiment", "delete", "4"], input="y\n",
                                   env={"EPOCHAL_MASTER": None})
    assert confirmed.exit_code == 0, confirmed.output
    assert run("experiment", "delete", "4", "--yes").stdout == "Deleted experiment 4\n"
    assert len(fake.sent("DELETE", "/experiments/4")) == 2


def test_config_prints_the_submitted_yaml_or_the_normalized_one(fake: FakeMaster) -> None:
    submitted = "name: digits\nsearcher:\n  name: random  # as written\n"
    fake.on("GET", "/experiments/4", {"experiment": experiment(originalConfig=submitted),
                                      "config": {"name": "digits", "max_restarts": 5}})

    assert run("experiment", "config", "4").stdout == submitted
    assert run("experiment", "config", "4", "--normalized").stdout == (
        "name: digits\nmax_restarts: 5\n")


def test_download_model_def_unpacks_the_files_and_nothing_outside(
    fake: FakeMaster, tmp_path: Path
) -> None:
    fake.on("GET", "/experiments/4/model_def", {"b64Tgz": base64.b64encode(
        _tgz({"train.py": b"print('hi')\n", "../escape.txt": b"no"})).decode()})

    good = tmp_path / "good"
    fake.on("GET", "/experiments/5/model_def", {"b64Tgz": base64.b64encode(
        _tgz({"train.py": b"print('hi')\n", "pkg/model.py": b"x = 1\n"})).decode()})
    result = run("experiment", "download-model-def", "5", str(good))
    assert result.exit_code == 0, result.output
    assert (good / "train.py").read_bytes() == b"print('hi')\n"
    assert (good / "pkg" / "model.py").read_bytes() == b"x = 1\n"
    assert "(2 files)" in result.stdout

    bad = tmp_path / "bad"
    refused = run("experiment", "download-model-def", "4", str(bad))
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: the model definition of experiment 4: ")
    assert "escape.txt" in refused.stderr and "Traceback" not in refused.output
    assert not (tmp_path / "escape.txt").exists()


def _tgz(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()
