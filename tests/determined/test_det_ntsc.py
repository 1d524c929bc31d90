"""Determined 0.38.1's own `det cmd|notebook|shell|tensorboard|task|job` against Epochal.

They run against the session's live master: its tasks wait for slots in pools no agent serves,
which is enough for launching, listing, describing and killing. Tasks that run (their output,
their exit, the proxy) are tested end to end in tests/browser/test_interactive_tasks.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from tests.determined.test_det_cli import Det, header, table_rows
from tests.integration.test_api import create
from tests.master_fixtures import ADMIN_PASSWORD, LiveMaster

live = pytest.mark.asyncio(loop_scope="session")
TASK_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@pytest.fixture
def det(live_master: LiveMaster, det_cli: Path, tmp_path: Path) -> Det:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path),
           "DET_MASTER": live_master.url, "DET_USER": "admin", "DET_PASS": ADMIN_PASSWORD,
           "PYTHONWARNINGS": "ignore"}
    return Det(det_cli, live_master.url, env)


async def run(det: Det, *args: str) -> subprocess.CompletedProcess[str]:
    """`det ARGS` off the event loop, which serves the live master meanwhile."""
    return await asyncio.to_thread(det.run, *args)


def own_pool() -> str:
    """A resource pool no agent serves: a task there waits for slots until it is killed."""
    return f"resources.resource_pool=det-ntsc-{uuid.uuid4().hex[:8]}"


@live
async def test_det_cmd_run_detached_list_describe_config_and_kill(det: Det) -> None:
    launched = await run(det, "cmd", "run", "-d", "--config", own_pool(), "echo hi")
    task_id = launched.stdout.strip()
    assert TASK_ID.match(task_id), launched.stdout

    listed = (await run(det, "cmd", "list")).stdout
    assert header(listed) == ["id", "username", "description", "state", "exitStatus",
                              "resourcePool", "workspaceName"]
    row = next(r for r in table_rows(listed) if r[0] == task_id)
    assert row[1:4] == ["admin", "Command echo hi", "QUEUED"]
    assert row[6] == "Uncategorized"
    quiet = (await run(det, "cmd", "list", "-q", "--all")).stdout.split()
    assert task_id in quiet
    described = json.loads((await run(det, "cmd", "describe", task_id[:8], "--json")).stdout)
    assert described["id"] == task_id and described["state"] == "QUEUED"
    config = (await run(det, "cmd", "config", task_id)).stdout
    assert "entrypoint: echo hi" in config

    tasks = (await run(det, "task", "list")).stdout
    assert any(r[0] == task_id and r[2] == "Command echo hi" for r in table_rows(tasks))

    killed = await run(det, "cmd", "kill", task_id)
    assert f"Killed command {task_id}" in killed.stdout
    for _ in range(100):
        row = next(r for r in table_rows((await run(det, "cmd", "list")).stdout)
                   if r[0] == task_id)
        if row[3] == "TERMINATED":
            break
        await asyncio.sleep(0.2)
    assert row[3] == "TERMINATED"


@live
async def test_det_notebook_shell_and_tensorboard_launch_detached_and_list(
    det: Det, api: httpx.AsyncClient
) -> None:
    notebook = (await run(det, "notebook", "start", "-d", "--config", own_pool())).stdout.strip()
    assert TASK_ID.match(notebook)
    listed = table_rows((await run(det, "notebook", "list")).stdout)
    assert any(r[0] == notebook and r[2] == f"JupyterLab ({notebook[:8]})" for r in listed)

    shell = (await run(det, "shell", "start", "-d", "--config", own_pool())).stdout.strip()
    assert TASK_ID.match(shell)
    assert shell in (await run(det, "shell", "list", "-q")).stdout.split()

    experiment = (await create(api))["experiment"]
    board = (await run(det, "tensorboard", "start", str(experiment["id"]), "-d", "--config",
                       own_pool())).stdout.strip()
    assert TASK_ID.match(board)
    boards = (await run(det, "tensorboard", "list")).stdout
    assert "experimentIds" in header(boards)
    assert any(r[0] == board and r[4] == f"[{experiment['id']}]" for r in table_rows(boards))

    for kind, task_id in (("notebook", notebook), ("shell", shell), ("tensorboard", board)):
        assert f"Killed {kind} {task_id}" in (await run(det, kind, "kill", task_id)).stdout
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


@live
async def test_det_job_list_shows_a_command(det: Det) -> None:
    """In the default pool (`det job list` lists the pools the master knows), waiting for a
    slot or holding one."""
    task_id = (await run(det, "cmd", "run", "-d", "--config", "resources.priority=7",
                         "sleep 600")).stdout.strip()
    row: list[str] = []
    for _ in range(100):
        row = next((r for r in table_rows((await run(det, "job", "list")).stdout)
                    if r[1] == task_id), [])
        if row:
            break
        await asyncio.sleep(0.2)
    assert row, f"command {task_id} never showed in det job list"
    assert row[2:5] == ["TYPE_COMMAND", "Command sleep 600", "7"]
    assert row[6] in ("0/1", "1/1") and row[8] == "admin"
    await run(det, "cmd", "kill", task_id)


async def epochal(live_master: LiveMaster, *args: str) -> subprocess.CompletedProcess[str]:
    """Epochal's own CLI, logged in as admin, off the event loop."""
    env = {**os.environ, "EPOCHAL_TOKEN": live_master.admin_token}
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "cli.main", "-m", live_master.url, *args],
        env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@live
async def test_epochal_verbs_launch_list_log_and_kill(
    live_master: LiveMaster, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    (tmp_path / "data.txt").write_text("x")
    config = tmp_path / "task.yaml"
    config.write_text("resources:\n  slots: 2\n")
    done = await epochal(live_master, "cmd", "run", "-d", "--config-file", str(config),
                         "--config", own_pool(), "--context", str(tmp_path), "python3", "a b.py")
    assert done.returncode == 0, done.stderr
    task_id = done.stdout.strip()
    described = (await api.get(f"/api/v1/commands/{task_id}")).json()
    assert described["config"]["entrypoint"] == "python3 'a b.py'"
    assert described["config"]["resources"]["slots"] == 2
    launch = await api.get(f"/api/v1/tasks/{task_id}/launch",
                           headers=live_master.agent_headers)
    assert launch.json()["hasContext"] is True
    await api.post("/api/v1/task/logs", headers=live_master.agent_headers, json={
        "logs": [{"taskId": task_id, "log": f"line {i}\n"} for i in range(3)]})

    listed = await epochal(live_master, "cmd", "list")
    assert task_id in listed.stdout and "QUEUED" in listed.stdout
    logs = await epochal(live_master, "cmd", "logs", task_id[:8], "--tail", "2")
    assert logs.stdout.splitlines() == ["line 1", "line 2"], logs.stderr
    bad = await epochal(live_master, "cmd", "run", "--config", "resources.slots=-1", "true")
    assert bad.returncode == 2 and "resources.slots: must be >= 0" in bad.stderr
    notebook = (await epochal(live_master, "notebook", "start", "-d", "--config",
                              own_pool())).stdout.strip()
    assert TASK_ID.match(notebook)
    assert notebook in (await epochal(live_master, "notebook", "list")).stdout
    await epochal(live_master, "notebook", "kill", notebook)
    opened = await epochal(live_master, "notebook", "open", notebook)
    assert opened.returncode == 1 and f"notebook {notebook} ended" in opened.stderr

    killed = await epochal(live_master, "cmd", "kill", task_id)
    assert killed.stdout.strip() == f"Killed command {task_id}", killed.stderr
    followed = await epochal(live_master, "cmd", "logs", "-f", task_id)
    assert followed.stdout.splitlines() == ["line 0", "line 1", "line 2"]
