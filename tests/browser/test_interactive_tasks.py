"""Interactive tasks end to end, as a Determined user runs them: Determined 0.38.1's own `det`
client against a real local cluster (master and an agent with two slots), a real JupyterLab, an
OpenSSH server and TensorBoard in the task environment, and real headless Chromium reaching them
through the master's proxy.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from playwright.sync_api import BrowserContext, Page, expect

from tests.browser.conftest import (
    ADMIN,
    TIMEOUT_MS,
    USER_PASSWORD,
    api_get,
    log_in,
    new_user,
    screenshot,
)
from tests.determined.test_det_cli import Det
from tests.e2e.cluster import DIGITS, Cluster, created_id
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture(scope="module")
def det(cluster: Cluster, det_venv: Path, det_cli: Path,
        tmp_path_factory: pytest.TempPathFactory) -> Det:
    home = tmp_path_factory.mktemp("det-tasks-home")
    env = {"PATH": f"{det_venv}:{os.environ.get('PATH', '')}", "HOME": str(home),
           "DET_MASTER": cluster.url, "DET_USER": ADMIN,
           "DET_PASS": cluster.secrets["admin_password"], "PYTHONWARNINGS": "ignore"}
    return Det(det_cli, cluster.url, env)


def sign_in(page: Page, cluster: Cluster) -> None:
    """The dashboard's login, which sets the cookie the proxy takes."""
    page.goto("/login")
    log_in(page, cluster.secrets["admin_password"])
    expect(page.locator("#whoami")).to_have_text(ADMIN)


def task(cluster: Cluster, task_id: str) -> dict[str, Any]:
    return dict(api_get(cluster, f"/api/v1/tasks/{task_id}")["task"])


def slots_used(cluster: Cluster) -> int:
    pools = api_get(cluster, "/api/v1/resource-pools")["resourcePools"]
    return sum(int(p.get("slotsUsed") or 0) for p in pools)


def wait_ready(cluster: Cluster, task_id: str, timeout: float = 120) -> None:
    def ready() -> bool:
        found = task(cluster, task_id)
        assert not found.get("endTime"), f"task {task_id} ended: {found}"
        return bool(found["allocations"] and found["allocations"][0].get("isReady"))

    wait_for(ready, timeout=timeout, what=f"task {task_id} to be ready")


def wait_ended(cluster: Cluster, task_id: str, timeout: float = 120) -> dict[str, Any]:
    return dict(wait_for(lambda: (t := task(cluster, task_id)).get("endTime") and t,
                         timeout=timeout, what=f"task {task_id} to end"))


def test_det_cmd_run_prints_the_output_and_frees_its_slot(det: Det, cluster: Cluster) -> None:
    result = det.run("cmd", "run", "echo hi from $DET_TASK_TYPE")
    assert re.search(r"hi from COMMAND\s*$", result.stdout, re.M), result.stdout
    launched = UUID.search(result.stdout)
    assert launched, result.stdout
    ended = wait_ended(cluster, launched.group(0))
    assert ended["allocations"][0]["state"] == "STATE_TERMINATED"
    wait_for(lambda: slots_used(cluster) == 0, timeout=30, what="the command's slot to be free")
    listed = json.loads(det.run("cmd", "list", "--json").stdout)
    assert any(c["id"] == launched.group(0) and c["state"] == "TERMINATED" for c in listed)


def test_epochal_cmd_run_exits_with_the_commands_code(cluster: Cluster) -> None:
    done = cluster.run("cmd", "run", "echo hi; exit 3", check=False)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["hi"]
    task_id = done.stderr.split("Launched command ")[1].split()[0]
    assert cluster.run("cmd", "logs", task_id).stdout.splitlines() == ["hi"]
    listed = cluster.json("cmd", "list")["commands"]
    assert next(c for c in listed if c["id"] == task_id)["state"] == "STATE_TERMINATED"


def test_det_cmd_run_ships_its_context_files(det: Det, tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_text("from the context\n")
    result = det.run("cmd", "run", "--context", str(tmp_path), "cat data.txt")
    assert "from the context" in result.stdout


def test_each_users_command_has_a_tmp_of_its_own(det: Det, cluster: Cluster) -> None:
    """A task's /tmp is its own, as a trial's is: what one user's command leaves there, another
    user's command does not see, and nothing is left in the agent's /tmp."""
    marker = f"left-by-admin-{uuid.uuid4().hex[:8]}"
    wrote = det.run("cmd", "run", f"echo private > /tmp/{marker} && ls /tmp")
    assert marker in wrote.stdout, wrote.stdout
    name = new_user(cluster, "tmp")
    other = Det(det.binary, cluster.url, {**det.env, "DET_USER": name, "DET_PASS": USER_PASSWORD})
    listed = other.run("cmd", "run", "ls -a /tmp; echo listed")
    assert "listed" in listed.stdout and marker not in listed.stdout, listed.stdout
    assert not Path("/tmp", marker).exists()


@pytest.fixture(scope="module")
def notebook(det: Det, cluster: Cluster) -> Iterator[str]:
    """`det notebook start` (it waits until JupyterLab is ready, then prints its address)."""
    result = det.run("notebook", "start", "--no-browser")
    found = UUID.search(result.stdout)
    assert found and "Jupyter Notebook is running at" in result.stdout, result.stdout
    yield found.group(0)
    det.run("notebook", "kill", found.group(0), check=False)


def test_a_notebook_runs_a_cell_through_the_proxy(
        notebook: str, context: BrowserContext, cluster: Cluster) -> None:
    page = context.new_page()
    try:
        sign_in(page, cluster)
        page.goto(f"/proxy/{notebook}/lab", timeout=TIMEOUT_MS * 2)
        page.locator(".jp-LauncherCard[data-category='Notebook']").first.click(
            timeout=TIMEOUT_MS * 2)
        # A cell run before the kernel is connected is dropped: wait until it is idle.
        page.get_by_text(re.compile(r"\| Idle")).first.wait_for(timeout=TIMEOUT_MS * 2)
        cell = page.locator(".jp-Cell .cm-content").first
        cell.click()
        page.keyboard.type("1+1")
        page.keyboard.press("Shift+Enter")
        output = page.locator(".jp-OutputArea-output").first
        output.wait_for(timeout=TIMEOUT_MS * 2)
        assert output.inner_text().strip() == "2"
    finally:
        screenshot(page, "notebook-cell")
        page.close()


def test_a_notebook_is_refused_to_another_user(notebook: str, cluster: Cluster) -> None:
    created = httpx.post(f"{cluster.url}/api/v1/users", headers=cluster.headers, timeout=30,
                         json={"user": {"username": "nb-other", "active": True},
                               "password": "pw-of-other"})
    assert created.status_code == 200, created.text
    login = httpx.post(f"{cluster.url}/api/v1/auth/login", timeout=30,
                       json={"username": "nb-other", "password": "pw-of-other"})
    token = login.json()["token"]
    refused = httpx.get(f"{cluster.url}/proxy/{notebook}/lab", timeout=30,
                        headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 403, refused.text
    assert notebook in refused.text
    owner = httpx.get(f"{cluster.url}/proxy/{notebook}/api/status", headers=cluster.headers,
                      timeout=30)
    assert owner.status_code == 200, owner.text


def test_an_idle_notebook_is_stopped(det: Det, cluster: Cluster, tmp_path: Path) -> None:
    config = tmp_path / "idle.yaml"
    config.write_text(yaml.safe_dump({"idle_timeout": "5s"}))
    result = det.run("notebook", "start", "--no-browser", "--config-file", str(config))
    found = UUID.search(result.stdout)
    assert found, result.stdout
    ended = wait_ended(cluster, found.group(0), timeout=150)
    assert "idle" in json.dumps(ended).lower() or ended["allocations"][0]["state"] == (
        "STATE_TERMINATED")
    described = api_get(cluster, f"/api/v1/notebooks/{found.group(0)}")["notebook"]
    assert "idle_timeout" in (described.get("exitStatus") or ""), described


def test_det_shell_start_runs_a_command_over_the_proxy(det: Det, cluster: Cluster) -> None:
    """`det shell start -- CMD` waits for the shell, runs CMD over ssh through Determined's
    tunnel and the master's proxy; the shell keeps running for `det shell open`."""
    started = det.run("shell", "start", "--", "echo", "shell says $DET_TASK_TYPE")
    found = re.search(r"det shell open (\S+)", started.stdout)
    assert found, started.stdout + started.stderr
    shell = found.group(1)
    try:
        assert "shell says SHELL" in started.stdout, started.stdout + started.stderr
        # It logs in as the user the shell runs as on its agent (the agent's task user).
        user = api_get(cluster, f"/api/v1/shells/{shell}")["shell"]["agentUserGroup"]["user"]
        again = det.run("shell", "open", shell, "--", "id", "-un")
        assert user in [line.strip() for line in again.stdout.splitlines()], (
            again.stdout + again.stderr)
    finally:
        det.run("shell", "kill", shell, check=False)
    wait_ended(cluster, shell)


def test_det_tensorboard_shows_the_loss_curve(det: Det, cluster: Cluster, page: Page) -> None:
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["searcher"]["max_length"] = {"batches": 60}
    path = Path(cluster.state_dir) / "tb-single.yaml"
    path.write_text(yaml.safe_dump(config))
    exp = created_id(cluster.run("experiment", "create", str(path), str(DIGITS)).stdout)
    wait_for(lambda: api_get(cluster, f"/api/v1/experiments/{exp}")["experiment"]["state"]
             == "STATE_COMPLETED", timeout=180, what="the experiment to complete")
    result = det.run("tensorboard", "start", str(exp), "--no-browser")
    found = UUID.search(result.stdout)
    assert found, result.stdout
    board = found.group(0)
    try:
        wait_ready(cluster, board)
        runs = wait_for(lambda: httpx.get(
            f"{cluster.url}/proxy/{board}/data/plugin/scalars/tags", headers=cluster.headers,
            timeout=30).json() or None, timeout=60, what="TensorBoard's scalar tags")
        run, tags = next(iter(runs.items()))
        assert "Determined/loss" in tags, runs
        points = httpx.get(f"{cluster.url}/proxy/{board}/data/plugin/scalars/scalars",
                           params={"run": run, "tag": "Determined/loss"},
                           headers=cluster.headers, timeout=30).json()
        assert len(points) >= 2, points  # a curve: the loss at every reported step
        assert [p[1] for p in points] == sorted(p[1] for p in points)
        sign_in(page, cluster)
        page.goto(f"/proxy/{board}/#timeseries")
        page.get_by_text(re.compile("loss")).first.wait_for(timeout=TIMEOUT_MS * 2)
        screenshot(page, "tensorboard-loss")
    finally:
        det.run("tensorboard", "kill", board, check=False)
