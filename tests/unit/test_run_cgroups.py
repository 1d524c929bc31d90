"""Per-run cgroups: a run's processes, `setsid` grandchildren included, die with it, and an
agent started again kills what its previous start's runs left. Real processes in a real
cgroup v2 hierarchy (root only; skipped with the reason elsewhere)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent_worker.process_runtime import ProcessRuntime
from agent_worker.run_cgroups import JOIN_THEN_RUN, RunCgroups, cgroup2_mount
from agent_worker.runtime import Launch
from tests.fakes.run_specs import spec_of
from wire.workflow_io import RunTrialInput


@pytest.fixture
def cgroups(tmp_path: Path) -> Iterator[RunCgroups]:
    made = RunCgroups.for_agent("test-agent", tmp_path)
    if made.root is None:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root with a cgroup v2 hierarchy; none could be used")
        pytest.skip("no usable cgroup v2 hierarchy here (not root, or no cgroup.kill)")
    yield made
    made.sweep()
    made.root.rmdir()


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def launch(run_dir: Path, entrypoint: str, run_id: int = 1) -> Launch:
    inp = RunTrialInput(experiment_id=1, trial_id=2, run_id=run_id, hparams={}, config={},
                        trial_seed=0, latest_checkpoint=None, steps_completed=0)
    launched = Launch(input=inp, spec=spec_of(), run_dir=run_dir, entrypoint=entrypoint,
                      env={})
    launched.workdir.mkdir(parents=True, exist_ok=True)
    return launched


def test_the_cgroup_v2_mount_is_found() -> None:
    assert cgroup2_mount() is None or (cgroup2_mount() / "cgroup.procs").exists()


async def test_a_setsid_grandchild_dies_with_its_run(cgroups: RunCgroups, tmp_path: Path) -> None:
    class Lines:
        def add(self, stdtype: str, line: str) -> None:
            pass

    runtime = ProcessRuntime(kill_grace_seconds=1, heartbeat_interval=0.1, cgroups=cgroups)
    pid_file = tmp_path / "escaped.pid"
    entrypoint = f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 300' & sleep 0.5; exit 0"
    status = await runtime.run(launch(tmp_path, entrypoint), Lines(), lambda: None)
    assert status.exit_code == 0
    escaped = int(pid_file.read_text())
    assert not alive(escaped), "a setsid grandchild outlived its run"
    assert [p for p in cgroups.root.iterdir() if p.is_dir()] == []  # its cgroup is gone too


def test_an_agent_started_again_kills_what_its_previous_runs_left(
    cgroups: RunCgroups, tmp_path: Path
) -> None:
    # A run of the agent's previous start, still going (the agent was kill -9'ed).
    cgroup = cgroups.create("trial-9-run-1")
    assert cgroup is not None
    orphan = subprocess.Popen(["/bin/sh", "-c", JOIN_THEN_RUN, "join", str(cgroup),
                               "setsid", "sleep", "300"], start_new_session=True)
    for _ in range(100):
        if RunCgroups.pids(cgroup):
            break
        time.sleep(0.02)
    [pid] = RunCgroups.pids(cgroup)
    # The same agent (id and work dir) starts again: the orphan is found and killed.
    again = RunCgroups.for_agent("test-agent", tmp_path)
    assert again.root == cgroups.root
    assert again.sweep() == 1
    orphan.wait(timeout=5)
    assert not alive(pid) and not cgroup.exists()
    # Another agent on this host (another work dir) has cgroups of its own.
    other = RunCgroups.for_agent("test-agent", tmp_path / "elsewhere")
    assert other.root != cgroups.root
    assert other.root is not None
    other.root.rmdir()
