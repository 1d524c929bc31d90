"""The dashboard's Tasks page in headless Chromium against a real local cluster: a command and
a real JupyterLab notebook launched through the API are listed with their states, the notebook
opens through the master's proxy, the command's logs show and its Kill button ends it; the
cluster page shows a queued task's slots and what it waits for; the
address Determined's `det notebook start` prints (made by Determined 0.38.1's own code) leads
to the notebook; another user sees the tasks but neither Open nor Kill.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import ADMIN, TIMEOUT_MS, api_get, log_in, screenshot
from tests.e2e.cluster import Cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

GREETING = "tasks-page-says-hi"
# JupyterLab starts in the task environment: give it a while on a busy machine.
READY_MS = 150_000
VIEWER = ("tasks-viewer", "pw-of-the-viewer")
# Determined 0.38.1's own address of a notebook, as `det notebook start` prints it after
# "Jupyter Notebook is running at: ".
DETERMINED_URL = """
import sys
from determined.cli import ntsc
task_id, service_address, description, pool, master = sys.argv[1:]
path = ntsc.make_interactive_task_url(task_id=task_id, service_address=service_address,
    description=description, resource_pool=pool, task_type="jupyter-lab",
    currentSlotsExceeded=False)
print(f"{master}/{path}")
"""


def post(cluster: Cluster, path: str, body: dict[str, Any],
         headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(cluster.url + path, json=body, headers=headers or cluster.headers,
                      timeout=30)


@pytest.fixture(scope="module")
def launched(cluster: Cluster) -> Iterator[dict[str, dict[str, Any]]]:
    """A command and a notebook (one slot each, of the agent's two), killed at the end."""
    tasks = {}
    for kind, path, body in (
            ("command", "commands", {"config": {"entrypoint": [f"echo {GREETING}; sleep 600"]}}),
            ("notebook", "notebooks", {"config": {}})):
        answer = post(cluster, f"/api/v1/{path}", body)
        assert answer.status_code == 200, answer.text
        tasks[kind] = {**answer.json()[kind], "path": path}
    yield tasks
    for task in tasks.values():
        killed = post(cluster, f"/api/v1/{task['path']}/{task['id']}/kill", {})
        assert killed.status_code == 200, killed.text


@pytest.fixture
def admin_page(page: Page, cluster: Cluster) -> Page:
    """`page` on /cluster, its context logged in as admin whatever ran before (the first test
    logs in through the redirect it tests; a test run alone, or after a 401, finds no token)."""
    page.goto("/login?next=%2Fcluster")
    log_in(page, cluster.secrets["admin_password"])
    expect(page).to_have_url(re.compile(r"/cluster$"))
    expect(page.locator("#whoami")).to_have_text(ADMIN)
    return page


def row(page: Page, task_id: str) -> Any:
    return page.locator(f"tr.task-row[data-id='{task_id}']")


def test_tasks_are_listed_opened_and_killed(
        page: Page, context: BrowserContext, cluster: Cluster,
        launched: dict[str, dict[str, Any]], temporal_ui_url: str | None) -> None:
    command, notebook = launched["command"], launched["notebook"]
    page.goto("/tasks")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Ftasks$"))
    log_in(page, cluster.secrets["admin_password"])
    expect(page).to_have_url(re.compile(r"/tasks$"))
    expect(page.locator("header nav a[href='/tasks']")).to_have_text("Tasks")

    command_row, notebook_row = row(page, command["id"]), row(page, notebook["id"])
    expect(command_row).to_contain_text("command")
    expect(command_row).to_contain_text(command["description"])
    expect(command_row).to_contain_text(ADMIN)
    expect(command_row).to_contain_text(command["id"][:8])
    expect(command_row).to_contain_text("default")
    expect(command_row).to_have_attribute("data-state", "RUNNING", timeout=READY_MS)
    expect(command_row.locator("a.open-task")).to_have_count(0)
    # Every action is on the screen: the last of them is not cut off at its right edge.
    logs_box = command_row.locator("button.show-logs").bounding_box()
    assert logs_box and logs_box["x"] + logs_box["width"] <= 1280, logs_box
    if temporal_ui_url:  # its workflow in Temporal's UI
        expect(command_row.locator("a.workflow-link")).to_have_attribute(
            "href", re.compile(rf"^{re.escape(temporal_ui_url)}/.*%22task-{command['id']}%22$"))
    rows = page.locator("tr.task-row")
    expect(rows.first).to_have_attribute("data-id", notebook["id"])  # newest first
    expect(notebook_row).to_have_attribute("data-state", "RUNNING", timeout=READY_MS)
    expect(notebook_row.locator("[data-state]")).to_have_text("RUNNING")

    open_link = notebook_row.locator("a.open-task")
    expect(open_link).to_have_attribute("href", f"/proxy/{notebook['id']}/lab")
    with context.expect_page() as opened:
        open_link.click()
    lab = opened.value
    try:
        lab.locator(".jp-LauncherCard").first.wait_for(timeout=READY_MS)
        expect(lab).to_have_title(re.compile("JupyterLab"))
    finally:
        lab.close()

    command_row.locator("button.show-logs").click()
    expect(page.locator("#task-logs h2")).to_contain_text(command["id"])
    expect(page.locator("#logs")).to_contain_text(GREETING)
    expect(command_row).to_have_class(re.compile(r"\bpicked\b"))

    page.once("dialog", lambda dialog: dialog.accept())
    command_row.locator("button.action-kill").click()
    expect(command_row).to_have_attribute("data-state", "TERMINATED", timeout=TIMEOUT_MS * 2)
    expect(command_row.locator("button.action-kill")).to_have_count(0)
    expect(page.locator("#task-log-status")).to_contain_text("has ended")
    expect(notebook_row).to_have_attribute("data-state", "RUNNING")
    screenshot(page, "tasks")


def test_the_cluster_page_links_a_running_task(
        admin_page: Page, launched: dict[str, dict[str, Any]]) -> None:
    page = admin_page
    notebook = launched["notebook"]["id"]
    queued = page.locator(f"#queue a[href='/tasks#{notebook}']")
    expect(queued).to_have_text(f"notebook {notebook[:8]}")
    expect(page.locator(f"#slots a[href='/tasks#{notebook}']")).to_have_count(1)
    queued.click()
    expect(row(page, notebook)).to_have_class(re.compile(r"\bpicked\b"))
    expect(page.locator("#task-logs h2")).to_contain_text(notebook)


def test_the_cluster_page_shows_a_queued_tasks_slots_and_what_it_waits_for(
        admin_page: Page, cluster: Cluster, launched: dict[str, dict[str, Any]]) -> None:
    """Issue 37 item 6: a task's job row shows its own slots (allocated / requested), no trial
    counts, and, waiting, what it waits for; a notebook's slot names the notebook."""
    page = admin_page
    notebook = launched["notebook"]
    answer = post(cluster, "/api/v1/commands", {"config": {
        "entrypoint": ["sleep 600"], "resources": {"slots": 2}}})  # the notebook holds one
    assert answer.status_code == 200, answer.text
    waiting = answer.json()["command"]["id"]
    try:
        queued = page.locator(f"tr.job-row[data-job-id='{waiting}']")
        expect(queued).to_have_attribute("data-state", "QUEUED")
        expect(queued.locator("td.slots")).to_have_text("0 / 2")
        expect(queued.locator("td.trials")).to_have_text("")
        expect(queued.locator("td.waits-for")).to_have_text(
            re.compile(r"^2 slots; [01] free in pool default$"))
        running = page.locator(f"tr.job-row[data-job-id='{notebook['id']}']")
        expect(running).to_have_attribute("data-state", "SCHEDULED")
        expect(running.locator("td.slots")).to_have_text("1 / 1")
        expect(running.locator("td.trials")).to_have_text("")
        expect(running.locator("td.waits-for")).to_have_text("")
        held = page.locator(f"#slots a[href='/tasks#{notebook['id']}']")
        expect(held).to_have_text(f"notebook {notebook['id'][:8]}")
        expect(held).to_have_attribute("title", notebook["description"])
        screenshot(page, "cluster-queue")
    finally:
        killed = post(cluster, f"/api/v1/commands/{waiting}/kill", {})
        assert killed.status_code == 200, killed.text


def test_determineds_notebook_address_opens_the_notebook(
        admin_page: Page, cluster: Cluster, det_venv: Path, tmp_path: Path,
        launched: dict[str, dict[str, Any]]) -> None:
    page = admin_page
    notebook = launched["notebook"]
    wait_for(lambda: api_get(cluster, f"/api/v1/notebooks/{notebook['id']}")["notebook"]["state"]
             == "STATE_RUNNING", READY_MS / 1000, "the notebook to run")
    printed = subprocess.run(
        [str(det_venv / "python"), "-c", DETERMINED_URL, notebook["id"],
         notebook["serviceAddress"], notebook["description"], notebook["resourcePool"],
         cluster.url], capture_output=True, text=True, timeout=60, check=True,
        env={"PATH": str(det_venv), "HOME": str(tmp_path)}).stdout.strip()
    assert printed.startswith(f"{cluster.url}/det/interactive/{notebook['id']}/jupyter-lab/")
    lab_path = f"/proxy/{notebook['id']}/lab"

    anonymous = httpx.get(printed, timeout=30)
    assert anonymous.status_code == 302, anonymous.text
    assert anonymous.headers["location"] == "/login?next=" + lab_path.replace("/", "%2F")
    token = cluster.headers["Authorization"].removeprefix("Bearer ")
    with_cookie = httpx.get(printed, cookies={"auth": token}, timeout=30)
    assert with_cookie.status_code == 302, with_cookie.text
    assert with_cookie.headers["location"] == lab_path
    wrong = httpx.get(f"{cluster.url}/interactive/{notebook['id']}/vscode/x", timeout=30)
    assert wrong.status_code == 400 and "service: one of jupyter-lab, tensorboard" in wrong.text

    page.goto(printed)
    expect(page).to_have_url(re.compile(re.escape(cluster.url + lab_path)), timeout=READY_MS)
    expect(page).to_have_title(re.compile("JupyterLab"), timeout=READY_MS)


def test_another_user_sees_the_tasks_but_may_not_open_or_kill_them(
        chromium: Browser, cluster: Cluster, launched: dict[str, dict[str, Any]]) -> None:
    username, password = VIEWER
    created = post(cluster, "/api/v1/users", {"user": {"username": username, "active": True},
                                              "password": password})
    assert created.status_code == 200, created.text
    notebook = launched["notebook"]["id"]
    context = chromium.new_context(base_url=cluster.url)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        page = context.new_page()
        page.goto("/login?next=%2Ftasks")
        page.fill("#username", username)
        page.fill("#password", password)
        page.click("#login-button")
        expect(page.locator("#whoami")).to_have_text(username)
        expect(row(page, notebook)).to_have_attribute("data-state", "RUNNING")
        expect(row(page, notebook).locator("button.show-logs")).to_have_count(1)
        expect(row(page, notebook).locator("button.action-kill")).to_have_count(0)
        expect(row(page, notebook).locator("a.open-task")).to_have_count(0)
        assert api_get(cluster, f"/api/v1/notebooks/{notebook}")["notebook"]["state"] == (
            "STATE_RUNNING")
    finally:
        context.close()
