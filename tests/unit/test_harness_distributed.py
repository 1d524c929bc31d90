"""harness.core's DistributedContext with real sockets: ranks as threads of this process."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.processes import free_port
from harness.core import _info
from harness.core._checkpoint import CheckpointContext
from harness.core._distributed import DistributedContext, DistributedError
from harness.core._info import TrialInfo


def run_ranks(size: int, body: Callable[[DistributedContext], Any], *, secret: str = "s3cret",
              port: int | None = None) -> list[Any]:
    """`body(context)` on every rank at once; each rank's result (or exception)."""
    port = port or free_port()
    results: list[Any] = [None] * size

    def rank(r: int) -> None:
        context = DistributedContext(rank=r, size=size, chief_ip="127.0.0.1", port=port,
                                     secret=secret, connect_timeout=10)
        try:
            results[r] = body(context)
        except Exception as err:  # the test looks at it
            results[r] = err
        finally:
            context.close()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_collectives_give_every_rank_the_same_answers() -> None:
    def body(d: DistributedContext) -> tuple[Any, ...]:
        gathered = d.gather({"rank": d.rank})
        together = d.allgather(d.rank * 10)
        chosen = d.broadcast("chief's" if d.is_chief else None)
        return gathered, together, chosen

    results = run_ranks(3, body)
    assert results[0] == ([{"rank": 0}, {"rank": 1}, {"rank": 2}], [0, 10, 20], "chief's")
    assert results[1] == results[2] == (None, [0, 10, 20], "chief's")


def test_a_peer_without_the_runs_token_is_refused() -> None:
    port = free_port()
    results: dict[int, Any] = {}

    def rank(r: int) -> None:
        d = DistributedContext(rank=r, size=2, chief_ip="127.0.0.1", port=port, secret="s3cret",
                               connect_timeout=10)
        results[r] = d.allgather(r)
        d.close()

    chief = threading.Thread(target=rank, args=(0,))
    chief.start()
    for _ in range(200):  # the forged rank 1 arrives first, once the chief listens
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall((1).to_bytes(4, "big") + b"x" * 32)
                break
        except OSError:
            threading.Event().wait(0.02)
    else:
        raise AssertionError("the chief never listened")
    worker = threading.Thread(target=rank, args=(1,))
    worker.start()
    chief.join(20)
    worker.join(20)
    assert results == {0: [0, 1], 1: [0, 1]}  # the forged rank was dropped, the real one taken


def test_a_rank_that_never_comes_fails_the_chief_with_its_rank() -> None:
    chief = DistributedContext(rank=0, size=3, chief_ip="127.0.0.1", port=free_port(),
                               secret="s", connect_timeout=0.5)
    with pytest.raises(DistributedError, match=r"ranks \[1, 2\] did not reach the chief"):
        chief.broadcast("x")


def test_torchruns_variables_place_the_process() -> None:
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "GROUP_RANK": "1"}
    assert _info.torch_distributed_environment(env) == {
        "rank": 3, "size": 4, "local_rank": 1, "local_size": 2, "cross_rank": 1,
        "cross_size": 2}
    assert _info.torch_distributed_environment({}) is None


def test_a_sharded_checkpoint_is_one_directory_with_every_ranks_files(tmp_path: Path) -> None:
    info = TrialInfo.off_cluster(hparams={}, max_length=10, length_unit="batches",
                                 latest_checkpoint=None, trial_seed=0,
                                 checkpoint_dir=str(tmp_path))

    def body(d: DistributedContext) -> str:
        checkpoint = CheckpointContext(info, None, distributed=d)
        with checkpoint.store_path({"steps_completed": 5}, shard=True) as (path, uuid):
            (path / f"rank-{d.rank}.bin").write_text(str(d.rank))
        return uuid

    uuids = run_ranks(3, body)
    assert len(set(uuids)) == 1
    stored = tmp_path / uuids[0]
    assert sorted(p.name for p in stored.iterdir()) == [
        "metadata.json", "rank-0.bin", "rank-1.bin", "rank-2.bin"]


def test_only_the_chief_stores_an_unsharded_checkpoint(tmp_path: Path) -> None:
    info = TrialInfo.off_cluster(hparams={}, max_length=10, length_unit="batches",
                                 latest_checkpoint=None, trial_seed=0,
                                 checkpoint_dir=str(tmp_path))
    worker = DistributedContext(rank=1, size=2, chief_ip="127.0.0.1", port=free_port())
    checkpoint = CheckpointContext(info, None, distributed=worker)
    with pytest.raises(RuntimeError, match="only the chief"), \
            checkpoint.store_path({"steps_completed": 1}):
        pass


def test_gathered_metrics_are_the_mean_over_the_ranks(caplog: pytest.LogCaptureFixture) -> None:
    from harness.core._train import TrainContext

    info = TrialInfo.off_cluster(hparams={}, max_length=10, length_unit="batches",
                                 latest_checkpoint=None, trial_seed=0, checkpoint_dir="ck")

    def body(d: DistributedContext) -> None:
        train = TrainContext(info, None, quiet=not d.is_chief, distributed=d)
        train._start()
        metrics = {"loss": float(d.rank), **({"only_chief": 7} if d.is_chief else {})}
        train.report_training_metrics(5, metrics, gather=True)
        train.report_training_metrics(6, {"loss": 10.0 + d.rank})  # the chief's alone

    with caplog.at_level("INFO", logger="harness.core"):
        assert run_ranks(3, body) == [None, None, None]
    reported = [r.getMessage() for r in caplog.records if "training metrics" in r.getMessage()]
    assert reported == ["training metrics at step 5: {'loss': 1.0, 'only_chief': 7.0}",
                        "training metrics at step 6: {'loss': 10.0}"]
