"""harness.core against a fake master behind httpx.MockTransport: batching, retries, flushing,
preemption, checkpoints, misuse and the off-cluster mode."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from typing import Any

import httpx
import pytest

import harness.core
from harness.core import (
    APIError,
    CheckpointContext,
    Context,
    PreemptContext,
    TrainContext,
    TrialInfo,
)
from harness.core._session import Backoff, Session
from harness.core._train import SpoolFull, _Sender
from tests.fakes.harness_master import FakeMaster
from tests.waiting import wait_for

FAST = Backoff(initial=0.001, maximum=0.01)


def cluster_info(tmp_path, **changes: Any) -> TrialInfo:
    data = {
        "master_url": "http://master:8080",
        "agent_id": "agent-1",
        "experiment_id": 1,
        "trial_id": 7,
        "trial_run_id": 1,
        "trial_seed": 5,
        "hparams": {"lr": 0.1},
        "experiment_config": {},
        "latest_checkpoint": None,
        "steps_completed": 0,
        "max_length": {"batches": 100},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp_path / "ckpt")},
        **changes,
    }
    return TrialInfo.from_dict(data)


def make_core(
    fake: FakeMaster, tmp_path, *, interval: float = 0.5, close_timeout: float | None = 10.0
) -> Context:
    info = cluster_info(tmp_path)
    session = Session(info.master_url or "", transport=fake.transport, backoff=FAST)
    return Context(
        info=info,
        train=TrainContext(info, session, interval=interval, close_timeout=close_timeout),
        checkpoint=CheckpointContext(info, session),
        preempt=PreemptContext(
            session, info.allocation_id, retry_delay=0.01, min_poll_interval=0.01
        ),
        session=session,
    )


def test_public_names() -> None:
    assert sorted(harness.core.__all__) == [
        "APIError",
        "CheckpointContext",
        "Context",
        "DistributedContext",
        "DistributedError",
        "EarlyExitReason",
        "MasterError",
        "MasterUnavailable",
        "PreemptContext",
        "TrainContext",
        "TrialInfo",
        "init",
    ]
    for name in harness.core.__all__:
        assert getattr(harness.core, name).__module__.startswith("harness.core")


# --- metrics ---------------------------------------------------------------------------------


def test_reports_go_in_batches_of_at_most_200(tmp_path) -> None:
    fake = FakeMaster()
    with make_core(fake, tmp_path, interval=60) as core:
        for step in range(1, 451):
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
        # 400 reports filled two batches; the other 50 wait for the interval or the close.
        wait_for(lambda: len(fake.steps("training")) == 400, 3, "two full batches", interval=0.005)
        time.sleep(0.05)
        assert len(fake.steps("training")) == 400
    assert fake.steps("training") == list(range(1, 451))
    assert [len(b) for b in fake.batches] == [200, 200, 50]
    first = fake.batches[0][0]
    assert first == {
        "group": "training",
        "metrics": {
            "trialId": 7,
            "trialRunId": 1,
            "stepsCompleted": 1,
            "metrics": {"avgMetrics": {"loss": 1.0}},
        },
    }


def test_a_few_reports_are_sent_after_the_interval(tmp_path) -> None:
    fake = FakeMaster()
    with make_core(fake, tmp_path, interval=0.2) as core:
        core.train.report_training_metrics(10, {"loss": 0.5})
        core.train.report_training_metrics(20, {"loss": 0.4})
        wait_for(lambda: fake.steps("training") == [10, 20], 2, "the interval's batch",
                 interval=0.005)
        assert len(fake.batches) == 1


def test_failed_batches_are_retried_until_delivered_with_the_same_keys(tmp_path) -> None:
    fake = FakeMaster()
    fake.fail_batches = 4
    with make_core(fake, tmp_path, interval=60) as core:
        for step in range(1, 31):
            core.train.report_training_metrics(step, {"loss": float(step)})
    assert fake.steps("training") == list(range(1, 31))
    assert len(fake.batches) == 5  # four failures, one success
    assert all(b == fake.batches[0] for b in fake.batches)  # retried unchanged
    assert fake.stored_count == 30


def test_a_lost_answer_never_counts_a_report_twice(tmp_path) -> None:
    fake = FakeMaster()
    fake.lose_answers = 1
    with make_core(fake, tmp_path, interval=60) as core:
        for step in (5, 10, 15):
            core.train.report_training_metrics(step, {"loss": 1.0})
        core.train.report_validation_metrics(15, {"validation_loss": 2.0})
    assert len(fake.batches) == 2 and fake.batches[0] == fake.batches[1]
    assert fake.stored_count == 4
    assert fake.steps("training") == [5, 10, 15] and fake.steps("validation") == [15]


def test_validation_metrics_are_delivered_before_the_call_returns(tmp_path) -> None:
    fake = FakeMaster()
    fake.fail_batches = 2
    with make_core(fake, tmp_path, interval=60) as core:
        core.train.report_training_metrics(50, {"loss": 0.3})
        core.train.report_validation_metrics(50, {"validation_loss": 0.2, "accuracy": 0.9})
        # No waiting: the call itself flushed (an interval of 60 s would not have).
        assert fake.steps("training") == [50] and fake.steps("validation") == [50]
        stored = fake.stored[(7, "validation", 50)]["metrics"]["metrics"]["avgMetrics"]
        assert stored == {"validation_loss": 0.2, "accuracy": 0.9}


def test_close_flushes_everything(tmp_path) -> None:
    fake = FakeMaster()
    core = make_core(fake, tmp_path, interval=60)
    with core:
        for step in range(1, 8):
            core.train.report_training_metrics(step, {"loss": 1.0})
        core.train.report_progress(0.07)
        assert fake.batches == []
    assert fake.steps("training") == list(range(1, 8))
    assert fake.progress == [0.07]


def test_close_is_bounded_and_loud_when_the_master_never_answers(tmp_path, caplog) -> None:
    fake = FakeMaster()
    fake.fail_batches = 10**9
    core = make_core(fake, tmp_path, interval=60, close_timeout=0.3)
    start = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="harness.core"), core:
        core.train.report_training_metrics(1, {"loss": 1.0})
    assert time.monotonic() - start < 3.0
    assert "NEVER ACCEPTED 1 METRIC REPORT(S)" in caplog.text


def test_a_master_away_past_every_retry_count_loses_no_report(tmp_path) -> None:
    """Metrics, a checkpoint report and the last metrics wait for the master however many
    attempts it takes (the session's retry count is 8)."""
    fake = FakeMaster()
    fake.fail_batches = 200
    fake.fail_checkpoints = 50
    with make_core(fake, tmp_path, interval=0.01, close_timeout=None) as core:
        for step in range(1, 31):
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
        with core.checkpoint.store_path({"steps_completed": 30}) as (path, _):
            (path / "w.bin").write_bytes(b"w")
        core.train.report_training_metrics(31, {"loss": 0.01})
    assert fake.steps("training") == list(range(1, 32))
    assert [c["metadata"]["steps_completed"] for c in fake.checkpoints] == [30]
    assert fake.fail_batches == 0 and fake.fail_checkpoints == 0


def test_metrics_reported_before_a_checkpoint_are_stored_before_it_is_registered(tmp_path) -> None:
    """A run killed just after its checkpoint is registered resumes after that checkpoint's
    step: the metrics up to it must be stored by then, not waiting in the sender's queue."""
    fake = FakeMaster()
    arrivals: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake.handle(request)
        if request.url.path.endswith("/metrics/batch"):
            arrivals.extend(r["metrics"]["stepsCompleted"]
                            for r in json.loads(request.content)["reports"])
        elif request.url.path == "/api/v1/checkpoints":
            arrivals.append("checkpoint")
        return response

    with harness.core.init(info=cluster_info(tmp_path),
                           transport=httpx.MockTransport(handler)) as core:
        core.train.report_training_metrics(1, {"loss": 1.0})
        wait_for(lambda: arrivals == [1], 5.0, "the first report, sent at once", interval=0.01)
        for step in range(2, 6):  # these wait for the sender's interval (0.5 s)
            core.train.report_training_metrics(step, {"loss": 1.0 / step})
        with core.checkpoint.store_path({"steps_completed": 5}) as (path, _):
            (path / "w.bin").write_bytes(b"w")
        assert arrivals == [1, 2, 3, 4, 5, "checkpoint"]


def test_reports_spill_to_disk_while_the_master_is_away_and_arrive_in_order(tmp_path) -> None:
    fake = FakeMaster()
    fake.fail_batches = 10**9
    session = Session("http://master:8080", transport=fake.transport, backoff=FAST)
    sender = _Sender(session, 7, interval=0.01, batch_size=10, memory_reports=20,
                     spool_dir=str(tmp_path / "spool"))
    sender.start()
    for step in range(1, 501):
        sender.put({"group": "training", "metrics": {"trialId": 7, "trialRunId": 1,
                                                      "stepsCompleted": step, "metrics": {}}})
    [spool_file] = (tmp_path / "spool").iterdir()
    assert spool_file.stat().st_size > 0 and oct(spool_file.stat().st_mode & 0o777) == "0o600"
    with fake.lock:
        fake.fail_batches = 0  # the master is back
    assert sender.close(None)
    order = [r["metrics"]["stepsCompleted"] for batch in fake.batches for r in batch]
    assert sorted(set(order)) == list(range(1, 501))
    assert order[-10:] == list(range(491, 501))  # the oldest first, the newest last
    assert not any((tmp_path / "spool").iterdir())  # the spool file is gone


def test_reports_past_the_spools_bound_fail_naming_it(tmp_path) -> None:
    fake = FakeMaster()
    fake.fail_batches = 10**9
    session = Session("http://master:8080", transport=fake.transport, backoff=FAST)
    sender = _Sender(session, 7, interval=60, memory_reports=2, max_spool_bytes=1_000,
                     spool_dir=str(tmp_path))
    sender.start()
    report = {"group": "training", "metrics": {"stepsCompleted": 1, "metrics": {"x": 1}}}
    with pytest.raises(SpoolFull, match="EPOCHAL_SPOOL_MAX_BYTES") as caught:
        for _ in range(1_000):
            sender.put(report)
    assert "bound of 1000 bytes" in str(caught.value)
    sender.close(0.2)


def test_a_refused_batch_surfaces_the_servers_message(tmp_path) -> None:
    fake = FakeMaster()
    fake.refuse_batches = True
    core = make_core(fake, tmp_path, interval=60)
    with pytest.raises(APIError, match="trial 1 is not running"), core:
        core.train.report_validation_metrics(1, {"validation_loss": 1.0})
    assert len(fake.batches) == 1  # a 4xx is not retried


def test_nan_and_infinity_become_null_and_numpy_numbers_are_accepted(tmp_path) -> None:
    np = pytest.importorskip("numpy")
    fake = FakeMaster()
    with make_core(fake, tmp_path) as core:
        core.train.report_training_metrics(
            np.int64(3),
            {"a": math.nan, "b": math.inf, "c": -math.inf, "d": np.float32(0.5), "e": np.int64(2)},
        )
    avg = fake.stored[(7, "training", 3)]["metrics"]["metrics"]["avgMetrics"]
    assert avg == {"a": None, "b": None, "c": None, "d": 0.5, "e": 2}


def test_progress_is_coalesced_and_early_exit_is_reported(tmp_path) -> None:
    fake = FakeMaster()
    with make_core(fake, tmp_path, interval=60) as core:
        for i in range(1, 11):
            core.train.report_progress(i / 10)
        core.train.report_early_exit("invalid_hp")
    assert fake.progress == [1.0]
    assert fake.early_exits == ["EXITED_REASON_INVALID_HP"]


# --- misuse ----------------------------------------------------------------------------------


def test_misuse_states_the_rule(tmp_path) -> None:
    fake = FakeMaster()
    core = make_core(fake, tmp_path)
    with pytest.raises(RuntimeError, match="use `with harness.core.init"):
        core.train.report_training_metrics(1, {"loss": 1.0})
    with core:
        t = core.train
        t.report_training_metrics(10, {"loss": 1.0})
        with pytest.raises(ValueError, match="steps_completed must not decrease: got 9 after 10"):
            t.report_training_metrics(9, {"loss": 1.0})
        t.report_validation_metrics(5, {"validation_loss": 1.0})  # groups are separate
        with pytest.raises(TypeError, match="metrics must be a dict of metric name to number"):
            t.report_training_metrics(11, [("loss", 1.0)])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="metrics must be a dict of numbers; 'loss' is str"):
            t.report_training_metrics(11, {"loss": "1.0"})
        with pytest.raises(TypeError, match="'ok' is bool"):
            t.report_training_metrics(11, {"ok": True})
        with pytest.raises(TypeError, match="steps_completed must be an int"):
            t.report_training_metrics(11.0, {"loss": 1.0})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="steps_completed must be >= 0"):
            t.report_validation_metrics(-1, {"loss": 1.0})
        with pytest.raises(ValueError, match=r"progress must be a number in \[0, 1\]"):
            t.report_progress(1.5)
        with pytest.raises(ValueError, match="early exit reason must be one of"):
            t.report_early_exit("bored")
        with (
            pytest.raises(ValueError, match="must include 'steps_completed'"),
            core.checkpoint.store_path({"epoch": 1}),
        ):
            pass
        with (
            pytest.raises(TypeError, match="must be JSON-serializable"),
            core.checkpoint.store_path({"steps_completed": 1, "x": object()}),
        ):
            pass
        t.report_early_exit("user_requested_stop")
        with pytest.raises(RuntimeError, match="may be called once"):
            t.report_early_exit("invalid_hp")
    with pytest.raises(RuntimeError, match="after the core context was closed"):
        core.train.report_training_metrics(20, {"loss": 1.0})
    with (
        pytest.raises(RuntimeError, match="after the core context was closed"),
        core.checkpoint.store_path({"steps_completed": 1}),
    ):
        pass
    with pytest.raises(TypeError, match="init\\(\\) takes 0 positional arguments"):
        harness.core.init({"lr": 1})  # type: ignore[misc]
    assert fake.steps("training") == [10]


# --- checkpoints -----------------------------------------------------------------------------


def test_store_path_reports_files_sizes_and_metadata(tmp_path) -> None:
    fake = FakeMaster()
    with make_core(fake, tmp_path) as core:
        with core.checkpoint.store_path({"steps_completed": 42, "note": "hi"}) as (path, sid):
            assert path == tmp_path / "ckpt" / sid and path.is_dir()
            (path / "weights.bin").write_bytes(b"x" * 10)
            (path / "sub").mkdir()
            (path / "sub" / "state.json").write_text("{}")
            assert fake.checkpoints == []  # reported only when the block ends
        with core.checkpoint.restore_path(sid) as restored:
            assert (restored / "weights.bin").read_bytes() == b"x" * 10
        assert core.checkpoint.get_metadata(sid) == {"steps_completed": 42, "note": "hi"}
    (ckpt,) = fake.checkpoints
    assert ckpt["uuid"] == sid
    assert (ckpt["taskId"], ckpt["allocationId"]) == ("1.7", "1.7.1")
    assert ckpt["state"] == "STATE_COMPLETED"
    assert ckpt["metadata"] == {"steps_completed": 42, "note": "hi"}
    size = len((path / "metadata.json").read_bytes())
    assert ckpt["resources"] == {"metadata.json": size, "sub/state.json": 2, "weights.bin": 10}
    assert ckpt["training"]["trialId"] == 7 and ckpt["training"]["hparams"] == {"lr": 0.1}
    assert ckpt["storagePath"] == str(path)


def test_store_path_that_raises_leaves_nothing(tmp_path) -> None:
    fake = FakeMaster()
    with make_core(fake, tmp_path) as core:
        with (
            pytest.raises(OSError, match="disk full"),
            core.checkpoint.store_path({"steps_completed": 1}) as (path, _),
        ):
            (path / "partial").write_text("x")
            raise OSError("disk full")
        assert not path.exists()
    assert fake.checkpoints == []


def test_restore_path_errors(tmp_path) -> None:
    fake = FakeMaster()
    with make_core(fake, tmp_path) as core:
        with (
            pytest.raises(FileNotFoundError, match="checkpoint nope not found"),
            core.checkpoint.restore_path("nope"),
        ):
            pass
        with pytest.raises(ValueError, match="not a path"), core.checkpoint.restore_path("../etc"):
            pass


def test_unsupported_storage_is_refused(tmp_path) -> None:
    info = cluster_info(tmp_path, checkpoint_storage={"type": "gcs", "bucket": "b"})
    with pytest.raises(ValueError, match="use shared_fs or s3"):
        harness.core.init(info=info, transport=FakeMaster().transport)


# --- preemption ------------------------------------------------------------------------------


def test_preemption_is_watched_in_the_background_and_acked_once(tmp_path) -> None:
    fake = FakeMaster()
    with make_core(fake, tmp_path) as core:
        wait_for(lambda: len(fake.polls) >= 2, 3, "two polls", interval=0.005)
        assert core.preempt.should_preempt() is False
        assert fake.polls[0] == "0" and fake.polls[1] == "60"
        fake.preempt.set()
        wait_for(core.preempt.should_preempt, 3, "should_preempt()", interval=0.005)
        assert core.preempt.should_preempt() is True
        assert fake.acks == 1


def test_a_stop_decided_on_a_validation_is_seen_at_the_next_should_preempt(tmp_path) -> None:
    """The master answers the validation report with its searcher's stop: no poll needed."""
    fake = FakeMaster()
    fake.stop_at_validation = 20
    info = cluster_info(tmp_path)
    with harness.core.init(info=info, transport=fake.transport) as core:
        core.train.report_validation_metrics(10, {"loss": 1.0})
        assert core.preempt.should_preempt() is False
        core.train.report_training_metrics(15, {"loss": 0.9})  # training answers never stop
        core.train.report_validation_metrics(20, {"loss": 0.8})
        assert core.preempt.should_preempt() is True
        assert not fake.preempt.is_set()  # the polls never said so
    assert fake.acks == 1


def test_preemption_watcher_survives_errors(tmp_path, caplog) -> None:
    fake = FakeMaster()
    fake.fail_polls = 3
    fake.preempt.set()
    with caplog.at_level(logging.WARNING, logger="harness.core"), make_core(fake, tmp_path) as core:
        wait_for(core.preempt.should_preempt, 3, "should_preempt()", interval=0.005)
    assert caplog.text.count("preemption check failed") == 3
    assert fake.acks == 1


def test_should_preempt_does_not_block(tmp_path) -> None:
    fake = FakeMaster()
    gate = threading.Event()

    def slow(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/signals/preemption"):
            gate.wait(5)
        return fake.handle(request)

    info = cluster_info(tmp_path)
    with harness.core.init(info=info, transport=httpx.MockTransport(slow)) as core:
        start = time.monotonic()
        assert core.preempt.should_preempt() is False
        assert time.monotonic() - start < 0.1
        gate.set()


# --- init ------------------------------------------------------------------------------------


def test_init_reads_the_environment(tmp_path, monkeypatch) -> None:
    from harness.core import _info

    path = tmp_path / "trial_info.json"
    info = cluster_info(tmp_path)
    path.write_text(
        json.dumps(
            {
                "master_url": "http://elsewhere:1",
                "experiment_id": 1,
                "trial_id": 7,
                "trial_run_id": 1,
                "trial_seed": 5,
                "hparams": {"lr": 0.1},
                "max_length": {"batches": 100},
                "checkpoint_storage": info.checkpoint_storage,
            }
        )
    )
    monkeypatch.setenv("EPOCHAL_TRIAL_INFO", str(path))
    monkeypatch.setenv("EPOCHAL_MASTER", "http://master:8080")
    _info._load.cache_clear()
    fake = FakeMaster()
    seen_hosts = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen_hosts.append(request.url.host)
        return fake.handle(request)

    with harness.core.init(transport=httpx.MockTransport(handler)) as core:
        assert core.on_cluster and core.info.trial_id == 7 and core.info.hparams == {"lr": 0.1}
        core.train.report_validation_metrics(3, {"validation_loss": 1.0})
    _info._load.cache_clear()
    assert fake.steps("validation") == [3]
    assert set(seen_hosts) == {"master"}


def test_off_cluster(tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.delenv("EPOCHAL_TRIAL_INFO", raising=False)
    with caplog.at_level(logging.INFO, logger="harness.core"), harness.core.init(
        hparams={"lr": 0.01}, checkpoint_dir=tmp_path / "local", max_length=20
    ) as core:
        assert not core.on_cluster
        assert core.info.hparams == {"lr": 0.01} and core.info.max_length == 20
        assert core.info.latest_checkpoint is None
        core.train.report_training_metrics(1, {"loss": 2.5})
        core.train.report_validation_metrics(1, {"validation_loss": 2.0})
        core.train.report_progress(0.5)
        core.train.report_early_exit("user_requested_stop")
        assert core.preempt.should_preempt() is False
        with core.checkpoint.store_path({"steps_completed": 1}) as (path, sid):
            (path / "w").write_text("1")
        with core.checkpoint.restore_path(sid) as restored:
            assert (restored / "w").read_text() == "1"
        with pytest.raises(ValueError, match="must not decrease"):
            core.train.report_training_metrics(0, {"loss": 2.5})
    assert path.parent == tmp_path / "local"
    assert "training metrics at step 1: {'loss': 2.5}" in caplog.text
    assert "stored checkpoint" in caplog.text

    with harness.core.init(
        checkpoint_dir=tmp_path / "local", latest_checkpoint=sid, trial_seed=9
    ) as again:
        assert again.info.latest_checkpoint == sid and again.info.trial_seed == 9
        with again.checkpoint.restore_path(sid) as restored:
            assert (restored / "w").read_text() == "1"
