"""The agent in-process against a real Temporal dev server and a fake master.

A small test workflow runs `run_trial` on the agent's pool (or own) task queue the way
TrialWorkflow does, so these tests cover the agent's side of the contract: queue names, the
activity name and types, heartbeats, cancellation and shutdown.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO

import psutil
import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from agent_worker.main import Agent, AgentConfig
from agent_worker.process_runtime import ProcessRuntime
from common.processes import free_port
from common.temporal_names import agent_task_queue
from tests.fakes.agent_master import FakeMaster, make_tgz
from wire.workflow_io import RunTrialInput, RunTrialResult

SLEEPER_PY = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open("pids.tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.rename("pids.tmp", "pids")
print("sleeping", flush=True)
time.sleep(600)
"""


@dataclass
class RunArgs:
    input: RunTrialInput
    task_queue: str


@workflow.defn(name="AgentTestRunTrial")
class RunTrialOnAgent:
    def __init__(self) -> None:
        self._kill = False

    @workflow.run
    async def run(self, args: RunArgs) -> RunTrialResult:
        handle = workflow.start_activity(
            "run_trial", args.input, result_type=RunTrialResult, task_queue=args.task_queue,
            start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        await workflow.wait_condition(lambda: handle.done() or self._kill)
        if not handle.done():
            handle.cancel()
        result: RunTrialResult = await handle
        return result

    @workflow.signal
    def kill(self) -> None:
        self._kill = True


@pytest.fixture
async def workflow_queue(temporal_client: Client) -> AsyncIterator[str]:
    queue = f"agent-test-{uuid.uuid4().hex[:8]}"
    async with Worker(temporal_client, task_queue=queue, workflows=[RunTrialOnAgent],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        yield queue


@dataclass
class RunningAgent:
    agent: Agent
    task: asyncio.Task[int]

    @property
    def config(self) -> AgentConfig:
        return self.agent.config


@pytest.fixture
async def agent(temporal_client: Client, temporal_address: str, master: FakeMaster,
                tmp_path: Path) -> AsyncIterator[RunningAgent]:
    suffix = uuid.uuid4().hex[:8]
    config = AgentConfig(master_url=master.url, temporal_address=temporal_address,
                         work_dir=tmp_path / "agent", agent_id=f"agent-{suffix}",
                         resource_pool=f"pool-{suffix}", slots=2)
    agent = Agent(config, client=temporal_client, heartbeat_throttle=0.3,
                  runtime=ProcessRuntime(kill_grace_seconds=0.5, heartbeat_interval=0.2))
    task = asyncio.create_task(agent.run())
    await asyncio.wait_for(agent.ready.wait(), timeout=10)
    yield RunningAgent(agent, task)
    agent.stop()
    assert await asyncio.wait_for(task, timeout=20) == 0


def trial_input(experiment_id: int, agent: RunningAgent,
                entrypoint: str = "python3 train.py") -> RunTrialInput:
    """A run whose checkpoints go beside the agent's work directory: the test's own (a fixed
    path under /tmp is anyone's to make a file of)."""
    storage = agent.config.work_dir.parent / "checkpoints"
    return RunTrialInput(
        experiment_id=experiment_id, trial_id=3, run_id=1, hparams={},
        config={"entrypoint": entrypoint, "searcher": {"name": "single", "metric": "loss",
                                                       "max_length": {"batches": 1}},
                "checkpoint_storage": {"type": "shared_fs", "host_path": str(storage)}},
        trial_seed=1, latest_checkpoint=None, steps_completed=0)


async def _pids(agent: RunningAgent) -> list[int]:
    path = agent.config.work_dir / "trials" / "3" / "run-1" / "workdir" / "pids"
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


def _dead(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


async def test_runs_a_trial_from_its_own_queue(
        temporal_client: Client, workflow_queue: str, agent: RunningAgent,
        master: FakeMaster) -> None:
    master.model_defs[1] = make_tgz({"train.py": "print('hello from the trial')\n"})
    cfg = agent.config
    assert master.registrations[0][0] == cfg.agent_id
    assert master.registrations[0][1]["resourcePool"] == cfg.resource_pool
    assert len(master.registrations[0][1]["bootId"]) == 32  # new on every start

    # The scheduler places runs on the agent's own queue; nothing polls the pool's any more.
    result = await temporal_client.execute_workflow(
        RunTrialOnAgent.run, RunArgs(trial_input(1, agent), agent_task_queue(cfg.agent_id)),
        id=f"agent-test-{uuid.uuid4().hex}", task_queue=workflow_queue)
    assert result == RunTrialResult(exit_code=0, agent_id=cfg.agent_id,
                                    message="exited with code 0")
    assert master.log_lines() == ["hello from the trial"]


async def test_kill_cancels_the_run_and_its_processes(
        temporal_client: Client, workflow_queue: str, agent: RunningAgent,
        master: FakeMaster) -> None:
    master.model_defs[2] = make_tgz({"train.py": SLEEPER_PY})
    handle = await temporal_client.start_workflow(
        RunTrialOnAgent.run,
        RunArgs(trial_input(2, agent), agent_task_queue(agent.config.agent_id)),
        id=f"agent-test-{uuid.uuid4().hex}", task_queue=workflow_queue)
    pids = await _pids(agent)
    started = time.monotonic()
    await handle.signal(RunTrialOnAgent.kill)
    with pytest.raises(WorkflowFailureError) as err:
        await handle.result()
    assert isinstance(err.value.cause, ActivityError)
    assert isinstance(err.value.cause.cause, CancelledError)
    assert time.monotonic() - started < 8
    assert all(_dead(pid) for pid in pids)
    assert master.log_lines() == ["sleeping"]


async def test_agent_shutdown_stops_its_trials(
        temporal_client: Client, workflow_queue: str, agent: RunningAgent,
        master: FakeMaster) -> None:
    master.model_defs[3] = make_tgz({"train.py": SLEEPER_PY})
    handle = await temporal_client.start_workflow(
        RunTrialOnAgent.run,
        RunArgs(trial_input(3, agent), agent_task_queue(agent.config.agent_id)),
        id=f"agent-test-{uuid.uuid4().hex}", task_queue=workflow_queue)
    pids = await _pids(agent)
    agent.agent.stop()
    assert await asyncio.wait_for(agent.task, timeout=20) == 0
    assert all(_dead(pid) for pid in pids)
    with pytest.raises(WorkflowFailureError) as err:
        await handle.result()
    assert isinstance(err.value.cause, ActivityError)
    cause = err.value.cause.cause
    assert isinstance(cause, ApplicationError) and cause.type == "AgentShutdown"


def _start_agent_process(master_url: str, temporal_address: str,
                         work_dir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent_worker", "--master", master_url, "--temporal",
         temporal_address, "--pool", f"pool-{uuid.uuid4().hex[:8]}", "--slots", "1",
         "--work-dir", str(work_dir), "--agent-id", f"proc-{uuid.uuid4().hex[:8]}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for_line(stream: IO[bytes], text: str, timeout: float) -> bool:
    """Read `stream` line by line until one contains `text` (False at EOF or timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            return False
        if text.encode() in line:
            return True
    return False


@pytest.mark.parametrize("master_up", [True, False], ids=["registered", "waiting-for-master"])
async def test_agent_process_exits_cleanly_on_sigterm(
        temporal_address: str, master: FakeMaster, tmp_path: Path, master_up: bool) -> None:
    url = master.url if master_up else f"http://127.0.0.1:{free_port()}"
    proc = _start_agent_process(url, temporal_address, tmp_path)
    try:
        deadline = time.monotonic() + 15
        if master_up:
            while not master.registrations:
                assert time.monotonic() < deadline and proc.poll() is None
                await asyncio.sleep(0.05)
        else:
            # Signal only once the agent runs (its handlers are set): it says it is retrying.
            assert proc.stderr is not None
            seen = await asyncio.to_thread(_wait_for_line, proc.stderr, "cannot register", 60)
            assert seen, "the agent never said it was waiting for its master"
            assert proc.poll() is None  # still waiting for its master
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 15)
        assert proc.stderr is not None
        assert code == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
