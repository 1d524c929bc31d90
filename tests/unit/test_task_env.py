"""The task environment: checked at agent start, put first for the entrypoint, the harness
reachable in it without Epochal, and a module it lacks named at once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from agent_worker.main import parse_args
from agent_worker.process_runtime import ProcessRuntime
from agent_worker.runtime import Launch
from agent_worker.task_env import HarnessPath, TaskEnvError, TaskEnvironment
from tests.fakes.run_specs import spec_of
from wire.workflow_io import RunTrialInput


def fake_env(tmp_path: Path, *, conda: bool = False) -> Path:
    """A prefix whose bin/python3 is this interpreter (enough to run and to be told apart)."""
    prefix = tmp_path / "userenv"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3").symlink_to(sys.executable)
    if conda:
        (prefix / "conda-meta").mkdir()
    return prefix


def launch(run_dir: Path, entrypoint: str = "true", **env: str) -> Launch:
    inp = RunTrialInput(experiment_id=1, trial_id=2, run_id=1, hparams={}, config={},
                        trial_seed=0, latest_checkpoint=None, steps_completed=0)
    return Launch(input=inp, spec=spec_of(), run_dir=run_dir, entrypoint=entrypoint,
                  env=dict(env))


def test_open_names_the_option_the_path_and_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(TaskEnvError, match=r"--task-env .*/nowhere: no such directory"):
        TaskEnvironment.open(tmp_path / "nowhere")
    with pytest.raises(TaskEnvError, match=r"bin/python3 does not exist"):
        TaskEnvironment.open(tmp_path)
    broken = tmp_path / "broken"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "python3").write_text("#!/bin/sh\necho no interpreter here >&2\nexit 3\n")
    (broken / "bin" / "python3").chmod(0o755)
    with pytest.raises(TaskEnvError, match=r"exited with code 3: no interpreter here"):
        TaskEnvironment.open(broken)


def test_a_virtualenv_or_a_conda_prefix_is_activated_as_its_own_scripts_would(
    tmp_path: Path
) -> None:
    venv = TaskEnvironment.open(fake_env(tmp_path))
    assert venv.activation() == {"VIRTUAL_ENV": str(tmp_path / "userenv")}
    assert venv.describe() == (f"the task environment {tmp_path}/userenv "
                               f"(python3 = {tmp_path}/userenv/bin/python3)")
    conda = TaskEnvironment.open(fake_env(tmp_path / "c", conda=True))
    assert conda.activation() == {"CONDA_PREFIX": str(tmp_path / "c" / "userenv")}


def test_the_entrypoint_sees_the_task_environment_and_only_the_harness_of_epochals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VIRTUAL_ENV", "/the/agents/venv")
    monkeypatch.setenv("PYTHONHOME", "/the/agents/home")
    task_env = TaskEnvironment.open(fake_env(tmp_path))
    harness_path = HarnessPath.prepare(tmp_path / "work")
    runtime = ProcessRuntime(task_env=task_env, harness_path=harness_path)
    env = runtime.environment(launch(tmp_path / "run", PYTHONPATH="/users/own"))
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "userenv" / "bin")
    assert env["VIRTUAL_ENV"] == str(tmp_path / "userenv") and "PYTHONHOME" not in env
    assert env["PYTHONPATH"].split(os.pathsep) == [
        str(tmp_path / "run" / "workdir"), str(harness_path.path), "/users/own"]
    assert env["EPOCHAL_HARNESS_FALLBACK_PATH"] == str(harness_path.fallback)
    assert sorted(p.name for p in harness_path.path.iterdir()) == ["harness"]
    assert {"httpx", "httpcore", "h11", "anyio", "idna", "certifi"} <= {
        p.name for p in harness_path.fallback.iterdir()}
    with pytest.raises(ValueError, match="needs the harness path"):
        ProcessRuntime(task_env=task_env)


def test_the_harness_imports_without_site_packages_and_appends_its_fallback(
    tmp_path: Path
) -> None:
    harness_path = HarnessPath.prepare(tmp_path / "work")
    # -S: no site-packages at all, as in an environment without httpx.
    probe = ("import sys, harness, httpx; print(harness.core.__name__); "
             "print(httpx.__file__); print(sys.path[-1])")
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe], capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(harness_path.path),
             "EPOCHAL_HARNESS_FALLBACK_PATH": str(harness_path.fallback)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    name, httpx_file, last = done.stdout.split()
    assert name == "harness.core"
    assert httpx_file.startswith(str(harness_path.fallback)) and last == str(
        harness_path.fallback)


async def test_a_module_the_environment_lacks_fails_the_run_at_once(tmp_path: Path) -> None:
    class Lines:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def add(self, stdtype: str, line: str) -> None:
            self.lines.append(line)

    task_env = TaskEnvironment.open(fake_env(tmp_path))
    runtime = ProcessRuntime(task_env=task_env, harness_path=HarnessPath.prepare(tmp_path / "w"),
                             heartbeat_interval=0.1)
    run_dir = tmp_path / "run"
    (run_dir / "workdir").mkdir(parents=True)
    logs = Lines()
    with pytest.raises(ApplicationError) as raised:
        await runtime.run(launch(run_dir, "python3 -c 'import no_such_module_here'"), logs,
                          lambda: None)
    assert raised.value.non_retryable and raised.value.type == "MissingModule"
    assert (f"{task_env.describe()} has no module named 'no_such_module_here'"
            in str(raised.value))
    assert any("ModuleNotFoundError" in line for line in logs.lines)  # still shipped
    # Other failures stay ordinary exits, retried as the config says.
    status = await runtime.run(launch(run_dir, "python3 -c 'raise SystemExit(4)'"), logs,
                               lambda: None)
    assert status.exit_code == 4


def test_the_agent_checks_its_task_environment_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, _ = parse_args(["--work-dir", str(tmp_path), "--task-env", str(fake_env(tmp_path))])
    assert config.task_env is not None and config.task_env.prefix == tmp_path / "userenv"
    with pytest.raises(SystemExit):
        parse_args(["--task-env", str(tmp_path / "missing")])
    assert "--task-env" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--runtime", "docker", "--task-env", str(tmp_path / "userenv")])
    assert "environment.image" in capsys.readouterr().err
