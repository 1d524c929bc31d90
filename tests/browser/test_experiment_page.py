"""The experiment page in headless Chromium (issue 37 items 5, 9, 11 and 13): its tabs, by click
and keyboard and from the address; parallel coordinates that follow the trials table's filter and
whose brush filters the table, the scatter and the curves; the scatter opening on the most
important hyperparameter; a copied address restoring the whole view in a fresh browser; and
"Open TensorBoard" and "Open notebook" launching a task as the viewing user and opening it
through the proxy (a running TensorBoard of the same user reused, another user's not).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from tests.browser.conftest import ADMIN, api_get, opened, screenshot, signed_in
from tests.browser.test_search_views import final_loss, seed_search
from tests.e2e.cluster import Cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

READY_MS = 180_000  # a task's image pulled and its server up, on a busy machine
OTHER = ("exp-page-other", "pw-of-exp-page-other")


@pytest.fixture(scope="module")
def search(cluster: Cluster) -> tuple[int, list[int]]:
    """A finished 40-trial search whose loss the learning rate decides."""
    return seed_search(cluster.env["EPOCHAL_DB_URL"], 40)


@pytest.fixture(scope="module")
def analyst(chromium: Browser, cluster: Cluster) -> Iterator[BrowserContext]:
    ctx = signed_in(chromium, cluster)
    yield ctx
    ctx.close()


def address(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.url).query)


def row_ids(page: Page) -> list[int]:
    return sorted(int(r.get_attribute("data-trial-id") or 0)
                  for r in page.locator("tr.trial-row").all())


def opens(cluster: Cluster, tab: Page, status: Locator, path: str) -> str:
    """The task the button launched (its id), once the tab it opened shows it at `path` under
    its proxy address; fails with the error shown beside the button and the task's logs."""
    expect(status).to_have_attribute("data-task", UUID_PATTERN)
    task_id = status.get_attribute("data-task") or ""

    def there() -> bool:
        shown = status.inner_text()
        if "failed" in shown:
            logs = httpx.get(f"{cluster.url}/api/v1/tasks/{task_id}/logs",
                             headers=cluster.headers, timeout=30).text
            lines = [json.loads(line)["result"]["log"] for line in logs.splitlines() if line]
            raise AssertionError(f"{shown}; the task's logs: {lines[-40:]}")
        return tab.url.startswith(f"{cluster.url}/proxy/{task_id}/{path}")

    wait_for(there, timeout=READY_MS / 1000, what=f"the tab to open {path or 'the task'}")
    return task_id


def test_tabs_switch_by_click_and_keyboard_and_open_from_the_address(
    analyst: BrowserContext, search: tuple[int, list[int]]
) -> None:
    experiment_id, _ = search
    page, errors = opened(analyst, f"/experiments/{experiment_id}")
    tabs = page.get_by_role("tab")
    expect(tabs).to_have_text(["Overview", "Trials", "Hyperparameters", "Checkpoints", "Logs",
                               "Config & files", "Notes"])
    expect(page.locator("#tab-overview")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#panel-overview")).to_be_visible()
    expect(page.locator("#panel-trials")).to_be_hidden()
    assert "tab" not in address(page)  # the plain address stays plain
    # The scatter was drawn while its tab was hidden; shown, it fills its box.
    expect(page.locator("#hp-scatter")).to_have_attribute("data-points", "40")
    page.click("#tab-hyperparameters")
    expect(page.get_by_role("tabpanel")).to_have_attribute("id", "panel-hyperparameters")
    assert address(page)["tab"] == ["hyperparameters"]
    page.wait_for_function(
        "() => { const gd = document.querySelector('#hp-scatter');"
        " return gd._fullLayout.width >= gd.getBoundingClientRect().width - 2; }")
    # The keyboard: arrows move along the tabs, End to the last; the chosen tab has the focus.
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tab-checkpoints")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#tab-checkpoints")).to_be_focused()
    expect(page.locator("#tab-hyperparameters")).to_have_attribute("tabindex", "-1")
    page.keyboard.press("End")
    expect(page.locator("#tab-notes")).to_be_focused()
    expect(page.locator("#exp-notes")).to_be_visible()
    page.keyboard.press("ArrowRight")  # round to the first
    expect(page.locator("#tab-overview")).to_have_attribute("aria-selected", "true")
    page.click("#tab-logs")
    # The address opens the tab; the page's polling keeps the hidden table live.
    page.reload()
    expect(page.locator("#tab-logs")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#experiment-logs")).to_be_visible()
    expect(page.locator("#panel-overview")).to_be_hidden()
    expect(page.locator("tr.trial-row")).to_have_count(40)
    screenshot(page, "experiment-tabs")
    assert not errors, errors
    page.close()


def test_parallel_coordinates_follow_the_filter_and_a_brush_filters_the_trials(
    analyst: BrowserContext, search: tuple[int, list[int]]
) -> None:
    experiment_id, ids = search
    page, errors = opened(analyst, f"/experiments/{experiment_id}?tab=trials")
    rows = page.locator("tr.trial-row")
    expect(rows).to_have_count(40)
    # The scatter opens on the most important hyperparameter (the learning rate decides).
    expect(page.locator("#hp-select")).to_have_value("lr")
    page.fill("#trial-filter", "hp.layers=2")
    page.press("#trial-filter", "Enter")
    expect(rows).to_have_count(10)
    layers_two = row_ids(page)
    page.click("#tab-hyperparameters")
    parallel = page.locator("#hp-parallel")
    parallel.scroll_into_view_if_needed()
    # The same trials as the table and the scatter: one line each.
    expect(parallel).to_have_attribute("data-points", "10")
    expect(page.locator("#hp-scatter")).to_have_attribute("data-points", "10")

    # Brush the metric's axis (the last) by dragging along it, as a user does.
    axis = page.locator("#hp-parallel g.axis-brush rect.background").last
    box = axis.bounding_box()
    assert box, "the metric axis's brush area"
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + box["height"] * 0.05)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * 0.55, steps=8)
    page.mouse.up()
    note = page.locator("#hp-brush-note .brush-range[data-axis='searcherMetric']")
    expect(note).to_be_visible()
    [brush] = address(page)["brush"]
    name, lo, hi = brush.split(":")
    assert name == "searcherMetric" and float(lo) < float(hi), brush
    inside = [ids[r] for r in range(40) if ids[r] in layers_two
              and float(lo) <= final_loss(r) <= float(hi)]
    assert 0 < len(inside) < 10, (brush, inside)
    expect(page.locator("#hp-scatter")).to_have_attribute("data-points", str(len(inside)))
    expect(page.locator("#curves .line-chart").first).to_have_attribute(
        "data-series", str(len(inside)))
    expect(parallel).to_have_attribute("data-points", "10")  # the others stay, greyed
    page.click("#tab-trials")
    expect(rows).to_have_count(len(inside))
    assert row_ids(page) == sorted(inside)
    expect(page.locator("#trials-brush-note")).to_contain_text("searcherMetric")
    screenshot(page, "experiment-brushed")
    # The brush is in the address: a reload draws it again and keeps the table within it.
    page.reload()
    expect(rows).to_have_count(len(inside))
    expect(page.locator("#trials-brush-note .brush-range")).to_have_count(1)
    page.click("#tab-hyperparameters")
    parallel.scroll_into_view_if_needed()
    expect(parallel).to_have_attribute("data-points", "10")
    ranges = page.evaluate("() => document.querySelector('#hp-parallel').data[0].dimensions"
                           ".map((d) => d.constraintrange || null)")
    assert ranges[:-1] == [None] * (len(ranges) - 1), ranges
    assert ranges[-1] == pytest.approx([float(lo), float(hi)]), ranges
    page.click("#tab-trials")

    # Clearing the brush: the filter's ten again, and no brush in the address.
    page.locator("#trials-brush-note button.brush-clear").click()
    expect(rows).to_have_count(10)
    assert "brush" not in address(page)
    expect(page.locator("#hp-brush-note")).to_be_empty()
    assert not errors, errors
    page.close()


def test_a_copied_address_restores_the_view_in_a_fresh_browser(
    chromium: Browser, cluster: Cluster, analyst: BrowserContext,
    search: tuple[int, list[int]]
) -> None:
    experiment_id, ids = search
    page, errors = opened(analyst, f"/experiments/{experiment_id}")
    rows = page.locator("tr.trial-row")
    expect(rows).to_have_count(40)
    page.check("#curves input.log-y")
    page.click("#curves button[data-group='both']")
    page.select_option("#curves select.metric-select", "accuracy")
    expect(page.locator("#curves")).to_have_attribute("data-metric", "accuracy")
    page.evaluate("() => { const s = document.querySelector('#curves input.smoothing');"
                  " s.value = '0.6'; s.dispatchEvent(new Event('change')); }")
    page.click("#tab-hyperparameters")
    page.select_option("#hp-select", "layers")
    page.click("#tab-trials")
    page.fill("#trial-filter", "searcherMetric<0.6")
    page.press("#trial-filter", "Enter")
    matching = [ids[r] for r in range(40) if final_loss(r) < 0.6]
    expect(rows).to_have_count(len(matching))
    momentum = page.locator("th button[data-sort='hp.optimizer.momentum']")
    momentum.click()
    expect(momentum).to_have_attribute("aria-sort", "ascending")
    momentum.click()  # again: descending
    expect(momentum).to_have_attribute("aria-sort", "descending")
    by_momentum = sorted((r for r in range(40) if ids[r] in matching),
                         key=lambda r: -((r * 0.41421356) % 1))
    expect(rows.first).to_have_attribute("data-trial-id", str(ids[by_momentum[0]]))
    page.click("#column-chooser summary")
    page.uncheck("#column-chooser input[data-column='Restarts']")
    picked = [ids[by_momentum[0]], ids[by_momentum[1]]]
    for trial_id in picked:
        page.check(f"tr.trial-row[data-trial-id='{trial_id}'] input.select-trial")
    copied = page.url
    page.close()

    fresh = signed_in(chromium, cluster)  # no storage of the first browser's
    try:
        again, again_errors = opened(fresh, copied)
        rows = again.locator("tr.trial-row")
        expect(again.locator("#tab-trials")).to_have_attribute("aria-selected", "true")
        expect(rows).to_have_count(len(matching))
        expect(again.locator("#trial-filter")).to_have_value("searcherMetric<0.6")
        expect(rows.first).to_have_attribute("data-trial-id", str(ids[by_momentum[0]]))
        expect(again.locator("th button[data-sort='hp.optimizer.momentum']")).to_have_attribute(
            "aria-sort", "descending")
        expect(again.get_by_role("columnheader", name="Restarts")).to_have_count(0)
        for trial_id in picked:
            expect(again.locator(f"tr.trial-row[data-trial-id='{trial_id}'] input.select-trial")
                   ).to_be_checked()
        expect(again.locator("#compare-button")).to_have_text("compare 2 selected")
        expect(again.locator("#hp-select")).to_have_value("layers")
        expect(again.locator("#curves")).to_have_attribute("data-group", "both")
        expect(again.locator("#curves")).to_have_attribute("data-metric", "accuracy")
        expect(again.locator("#curves input.log-y")).to_be_checked()
        expect(again.locator("#curves input.smoothing")).to_have_value("0.6")
        assert again_errors == [] and errors == [], (again_errors, errors)
        again.close()
    finally:
        fresh.close()


def other_user(cluster: Cluster) -> dict[str, str]:
    """A second, ordinary user's headers."""
    username, password = OTHER
    created = httpx.post(f"{cluster.url}/api/v1/users", headers=cluster.headers, timeout=30,
                         json={"user": {"username": username, "active": True},
                               "password": password})
    assert created.status_code == 200, created.text
    login = httpx.post(f"{cluster.url}/api/v1/auth/login", timeout=30,
                       json={"username": username, "password": password})
    return {"Authorization": f"Bearer {login.json()['token']}"}


def kill(cluster: Cluster, kind: str, task_id: str) -> None:
    httpx.post(f"{cluster.url}/api/v1/{kind}/{task_id}/kill", headers=cluster.headers,
               timeout=30)


def test_open_tensorboard_launches_one_as_the_viewer_reuses_it_and_opens_it(
    analyst: BrowserContext, cluster: Cluster, experiment_id: int
) -> None:
    page, errors = opened(analyst, f"/experiments/{experiment_id}")
    status = page.locator("#open-tensorboard-status")
    launched: list[str] = []
    try:
        with page.context.expect_page() as tab:
            page.click("#open-tensorboard")
        expect(status).to_contain_text("starting...")
        board = tab.value
        launched.append(opens(cluster, board, status, ""))
        expect(status.locator("a.launch-open")).to_have_text("TensorBoard ready: open")
        mine = api_get(cluster, f"/api/v1/tensorboards/{launched[0]}")["tensorboard"]
        assert (mine["username"], mine["experimentIds"]) == (ADMIN, [experiment_id]), mine
        screenshot(board, "experiment-tensorboard")
        board.close()

        # Another user's TensorBoard of the same experiment is theirs: never the one opened.
        theirs = httpx.post(f"{cluster.url}/api/v1/tensorboards", headers=other_user(cluster),
                            timeout=30, json={"experimentIds": [experiment_id]})
        assert theirs.status_code == 200, theirs.text
        launched.append(theirs.json()["tensorboard"]["id"])
        # Again: the user's running one is opened, no second one launched.
        with page.context.expect_page() as tab:
            page.click("#open-tensorboard")
        assert opens(cluster, tab.value, status, "") == launched[0]
        boards = api_get(cluster, "/api/v1/tensorboards?users=admin")["tensorboards"]
        running = [b["id"] for b in boards if b["experimentIds"] == [experiment_id]
                   and b["state"] not in ("STATE_TERMINATING", "STATE_TERMINATED")]
        assert running == launched[:1], running
        tab.value.close()
        assert not errors, errors
    finally:
        for task_id in launched:
            kill(cluster, "tensorboards", task_id)
        page.close()


def test_open_tensorboard_on_a_trials_page_shows_that_trial(
    analyst: BrowserContext, cluster: Cluster, experiment_id: int
) -> None:
    trial_id = api_get(cluster, f"/api/v1/experiments/{experiment_id}/trials")["trials"][0]["id"]
    page, errors = opened(analyst, f"/trials/{trial_id}")
    status = page.locator("#open-tensorboard-status")
    try:
        with page.context.expect_page() as tab:
            page.click("#open-tensorboard")
        board = opens(cluster, tab.value, status, "")
        found = api_get(cluster, f"/api/v1/tensorboards/{board}")["tensorboard"]
        assert (found["username"], found["experimentIds"], found["trialIds"]) == (
            ADMIN, [], [trial_id]), found
        tab.value.close()
        assert not errors, errors
    finally:
        if status.get_attribute("data-task"):
            kill(cluster, "tensorboards", status.get_attribute("data-task") or "")
        page.close()


def test_open_notebook_launches_one_in_the_experiments_workspace(
    analyst: BrowserContext, cluster: Cluster, search: tuple[int, list[int]]
) -> None:
    experiment_id, _ = search
    experiment = api_get(cluster, f"/api/v1/experiments/{experiment_id}")["experiment"]
    page, errors = opened(analyst, f"/experiments/{experiment_id}")
    status = page.locator("#open-notebook-status")
    try:
        with page.context.expect_page() as tab:
            page.click("#open-notebook")
        notebook = opens(cluster, tab.value, status, "lab")
        found: dict[str, Any] = api_get(cluster, f"/api/v1/notebooks/{notebook}")["notebook"]
        assert (found["username"], found["workspaceId"]) == (ADMIN, experiment["workspaceId"])
        assert found["description"] == f"JupyterLab (experiment {experiment_id})"
        tab.value.close()
        assert not errors, errors
    finally:
        notebook = status.get_attribute("data-task") or ""
        if notebook:
            kill(cluster, "notebooks", notebook)
            wait_for(lambda: api_get(cluster, f"/api/v1/tasks/{notebook}")["task"]["endTime"],
                     timeout=60, what="the notebook to end")
        page.close()


UUID_PATTERN = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_a_launch_the_master_refuses_is_explained_beside_its_button(
    analyst: BrowserContext, cluster: Cluster
) -> None:
    """A notebook for an experiment in an archived workspace: the master's reason beside the
    button, and the tab opened for it closed."""
    experiment_id, _ = seed_search(cluster.env["EPOCHAL_DB_URL"], 3)

    def post(path: str, body: dict[str, Any]) -> Any:
        answer = httpx.post(cluster.url + path, json=body, headers=cluster.headers, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()

    workspace = post("/api/v1/workspaces", {"name": "exp-page-archived"})["workspace"]["id"]
    project = post(f"/api/v1/workspaces/{workspace}/projects", {"name": "shelved"})
    post(f"/api/v1/experiments/{experiment_id}/move",
         {"destinationProjectId": project["project"]["id"]})
    post(f"/api/v1/workspaces/{workspace}/archive", {})
    page, errors = opened(analyst, f"/experiments/{experiment_id}")
    with page.context.expect_page() as tab:
        page.click("#open-notebook")
    expect(page.locator("#open-notebook-status .error")).to_have_text(re.compile(
        r"^notebook failed: workspace 'exp-page-archived' is archived: workspaceId: workspace"
        r" \d+ is archived; unarchive it first$"))
    expect(page.locator("#open-notebook")).to_be_enabled()
    assert tab.value.is_closed()  # closed before the reason was shown
    assert not errors, errors
    page.close()


def test_the_checkpoints_tab_lists_the_experiments_checkpoints(
    analyst: BrowserContext, cluster: Cluster, experiment_id: int
) -> None:
    stored = wait_for(lambda: api_get(cluster, f"/api/v1/experiments/{experiment_id}/"
                                      "checkpoints")["checkpoints"],
                      timeout=60, what="the grid's first checkpoints (every 5 batches)")
    page, errors = opened(analyst, f"/experiments/{experiment_id}?tab=checkpoints")
    rows = page.locator("#experiment-checkpoints tr.checkpoint-row")
    expect(rows.first).to_be_visible()
    assert rows.count() >= len(stored)
    expect(page.locator(f"tr.checkpoint-row[data-uuid='{stored[0]['uuid']}']")).to_have_count(1)
    assert not errors, errors
    page.close()
