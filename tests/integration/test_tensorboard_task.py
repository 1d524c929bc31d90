"""A TENSORBOARD task's program against the session's master: `python -m harness.tensorboard` as a
real process, with a user's token, serving a trial's stored metrics through TensorBoard's own HTTP
API under the proxy's prefix, and growing as the trial reports more.

The master runs in this test's event loop, so the program and the harness's (blocking) client
run in a child process or a thread, never in the loop.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from common.processes import free_port
from harness import tensorboard as tb
from harness.core._session import Session
from tests.integration.test_auth import ordinary  # noqa: F401 (a fixture: the owner's token)
from tests.integration.test_metrics_api import report
from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")

REPO = Path(__file__).resolve().parents[2]
SEARCHER = {"name": "single", "metric": "loss", "smaller_is_better": True,
            "max_length": {"batches": 1000}}


async def make_trial(master: LiveMaster, *, ended: bool = False) -> tuple[int, int]:
    """An experiment with one trial, as rows (no workflow is needed to read them)."""
    config = {"name": "tensorboard-task", "searcher": SEARCHER,
              "resources": {"resource_pool": "default"}}
    async with master.pool.acquire() as conn:
        experiment_id: int = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state)"
            " VALUES ('tensorboard-task', $1, '', 1, $2) RETURNING id",
            config, "COMPLETED" if ended else "ACTIVE",
        )
        trial_id: int = await conn.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state)"
            " VALUES ($1, 0, '{}', 1, $2) RETURNING id",
            experiment_id, "COMPLETED" if ended else "RUNNING",
        )
    return experiment_id, trial_id


@contextmanager
def program(args: list[str], master_url: str, token: str, stderr: Path
            ) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m harness.tensorboard ARGS` as the agent starts it; killed if still running."""
    env = {**os.environ, "DET_MASTER": master_url, "DET_USER_TOKEN": token,
           "PYTHONPATH": str(REPO)}
    env.pop("EPOCHAL_MASTER", None)
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "harness.tensorboard", *args],
            cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def exit_code(process: subprocess.Popen[bytes], seconds: float) -> int:
    for _ in range(int(seconds * 10)):
        if process.poll() is not None:
            return process.returncode
        await asyncio.sleep(0.1)
    raise AssertionError(f"the program did not exit within {seconds}s")


@asynccontextmanager
async def board(port: int, prefix: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}{prefix}",
                                 timeout=30) as client:
        yield client


async def scalars(client: httpx.AsyncClient, run: str, tag: str,
                  process: subprocess.Popen[bytes], log: Path,
                  until_step: int, seconds: float = 120) -> dict[int, float]:
    """step → value of a tag as TensorBoard serves it, once it shows `until_step`."""
    seen: dict[int, float] = {}
    for _ in range(int(seconds * 2)):
        assert process.poll() is None, f"the program exited: {log.read_text()}"
        try:
            answer = await client.get("/data/plugin/scalars/scalars",
                                      params={"run": run, "tag": tag})
        except httpx.TransportError:
            answer = None
        if answer is not None and answer.status_code == 200:
            seen = {step: value for _, step, value in answer.json()}
            if until_step in seen:
                return seen
        await asyncio.sleep(0.5)
    raise AssertionError(f"{tag} of {run} never reached step {until_step}: {seen}\n"
                         f"{log.read_text()}")


async def test_tensorboard_serves_stored_metrics_and_grows_with_new_ones(
    api: httpx.AsyncClient, live_master: LiveMaster, tmp_path: Path,
    ordinary: str,  # noqa: F811
) -> None:
    experiment_id, trial_id = await make_trial(live_master)
    await report(api, trial_id, "training", {s: {"loss": 1.0 / s, "phase": "warm-up"}
                                             for s in range(1, 51)})
    await report(api, trial_id, "validation", {25: {"loss": 0.3}, 50: {"loss": 0.2}})
    ended_experiment, ended_trial = await make_trial(live_master, ended=True)
    await report(api, ended_trial, "training", {s: {"loss": 2.0 / s} for s in (10, 20)})

    task_id = str(uuid.uuid4())
    prefix = f"/proxy/{task_id}"
    port = free_port()
    run = f"experiment_{experiment_id}/trial_{trial_id}"
    ended_run = f"experiment_{ended_experiment}/trial_{ended_trial}"
    log = tmp_path / "tensorboard.log"
    args = ["--host", "127.0.0.1", "--port", str(port), "--path-prefix", prefix,
            "--experiment-ids", f"{experiment_id},{ended_experiment}",
            "--logdir", str(tmp_path / "logdir"), "--refresh-seconds", "1"]
    with program(args, live_master.url, ordinary, log) as process:
        async with board(port, prefix) as client:
            loss = await scalars(client, run, "Determined/loss", process, log, until_step=50)
            assert sorted(loss) == list(range(1, 51))
            assert loss[1] == 1.0 and loss[50] == pytest.approx(0.02)
            validation = await scalars(client, run, "Determined/val_loss", process, log,
                                       until_step=50)
            assert validation == pytest.approx({25: 0.3, 50: 0.2})
            ended_loss = await scalars(client, ended_run, "Determined/loss", process, log,
                                       until_step=20)
            assert ended_loss == pytest.approx({10: 0.2, 20: 0.1})
            tags = (await client.get("/data/plugin/scalars/tags")).json()
            assert set(tags[run]) == {"Determined/loss", "Determined/val_loss"}
            assert set(tags[ended_run]) == {"Determined/loss"}

            deleted = await api.delete(f"/api/v1/experiments/{ended_experiment}")
            assert deleted.status_code == 200, deleted.text
            await report(api, trial_id, "training", {s: {"loss": 1.0 / s} for s in (60, 70)})
            await report(api, trial_id, "validation", {70: {"loss": 0.1}})
            loss = await scalars(client, run, "Determined/loss", process, log, until_step=70)
            assert sorted(loss) == [*range(1, 51), 60, 70]
            assert loss[70] == pytest.approx(1 / 70)
            validation = await scalars(client, run, "Determined/val_loss", process, log,
                                       until_step=70)
            assert validation == pytest.approx({25: 0.3, 50: 0.2, 70: 0.1})
            assert await scalars(client, ended_run, "Determined/loss", process, log,
                                 until_step=20) == ended_loss

        process.send_signal(signal.SIGTERM)
        assert await exit_code(process, 30) == 0, log.read_text()
    assert f"experiment {ended_experiment} was deleted" in log.read_text()
    assert "could not refresh" not in log.read_text()
    event_files = list((tmp_path / "logdir" / run).glob("events.out.tfevents.*"))
    assert len(event_files) == 1


@pytest.mark.parametrize(
    ("ids", "token", "expected"),
    [
        (["--experiment-ids", "2147483000"], None, "experiment 2147483000 not found"),
        (["--trial-ids", "2147483000"], None, "trial 2147483000 not found"),
        (["--experiment-ids", "1"], "not-a-session",
         "the master at {url} refused the token in DET_USER_TOKEN: "),
    ],
)
async def test_a_failed_start_is_one_line_and_a_non_zero_exit(
    live_master: LiveMaster, tmp_path: Path, ordinary: str,  # noqa: F811
    ids: list[str], token: str | None, expected: str,
) -> None:
    log = tmp_path / "tensorboard.log"
    args = ["--port", str(free_port()), "--logdir", str(tmp_path / "logdir"), *ids]
    with program(args, live_master.url, token or ordinary, log) as process:
        assert await exit_code(process, 60) == 1
    lines = log.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("harness.tensorboard: error: "
                               + expected.format(url=live_master.url)), lines


async def test_reports_are_read_in_bounded_pages(
    api: httpx.AsyncClient, live_master: LiveMaster, ordinary: str  # noqa: F811
) -> None:
    """The API downsamples a long range; the reader still gets every report, in pages."""
    _, trial_id = await make_trial(live_master)
    steps = [s * s for s in range(1, 301)] + list(range(90_001, 90_201))
    await report(api, trial_id, "training", {s: {"loss": 1.0 / s} for s in steps})
    requests: list[httpx.Request] = []

    def read(page_size: int, after: int | None) -> list[list[dict[str, Any]]]:
        session = Session(live_master.url, token=ordinary)
        session._client.event_hooks["request"].append(requests.append)
        try:
            reader = tb.MetricReader(session, page_size=page_size)
            return [list(page) for page in reader.reports(trial_id, tb.TRAINING, after)]
        finally:
            session.close()

    for page_size, after in ((7, None), (50, None), (1000, None), (7, 80_000)):
        requests.clear()
        pages = await asyncio.to_thread(read, page_size, after)
        wanted = [s for s in steps if after is None or s > after]
        assert [r["stepsCompleted"] for page in pages for r in page] == wanted, page_size
        assert all(1 <= len(page) <= page_size for page in pages), page_size
        assert len(requests) <= 2 * len(wanted) / page_size + 4, (page_size, len(requests))
