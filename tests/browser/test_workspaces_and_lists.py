"""The experiments list, workspaces and cross-experiment comparison in the dashboard (headless
Chromium): finished experiments written straight to the database, then sorted by a column on
the server, searched (the pager counting only matches), shown with the archived ones, and the
view restored from a copied address in a new page.
"""

from __future__ import annotations

import re
import uuid

import asyncpg
import httpx
import pytest
from playwright.sync_api import BrowserContext, expect

from tests.browser.conftest import on_database, opened, screenshot
from tests.e2e.cluster import Cluster

pytestmark = pytest.mark.slow

COUNT = 60
STEPS = 10


def seed_experiments(db_url: str, tag: str, count: int) -> list[int]:
    """`count` finished experiments `lst<tag>-nXX`, experiment i running i minutes, each with
    two trials (lr differs by experiment, layers by trial) and validation curves (loss and
    accuracy; f1 too in n21 alone); n05 is archived. Returns their ids by i."""
    async def seed(conn: asyncpg.Connection) -> list[int]:
        ids: list[int] = []
        for i in range(count):
            config = {"name": f"lst{tag}-n{i:02d}", "entrypoint": "python3 train.py",
                      "searcher": {"name": "grid", "metric": "validation_loss",
                                   "smaller_is_better": True,
                                   "max_length": {"batches": STEPS}},
                      "resources": {"resource_pool": "default"},
                      "hyperparameters": {"lr": {"type": "const", "val": 0.01 * (i + 1)},
                                          "layers": {"type": "categorical", "vals": [1, 2]}}}
            experiment_id = await conn.fetchval(
                "INSERT INTO experiments (name, config, original_config, seed, state, owner,"
                " planned_trials, archived, start_time, end_time)"
                " VALUES ($1, $2, '', 1, 'COMPLETED', 'admin', 2, $3,"
                "  now() - interval '1 day' + $4 * interval '1 second',"
                "  now() - interval '1 day' + $4 * interval '1 second' + $5 * interval '1 minute')"
                " RETURNING id", config["name"], config, i == 5, i, i)
            trials = await conn.fetchval(
                "WITH t AS (INSERT INTO trials (experiment_id, request_id, hparams, seed, state,"
                "  steps_completed, progress, end_time)"
                "  SELECT $1, r, jsonb_build_object('lr', $2::float8, 'layers', r + 1), r,"
                "   'COMPLETED', $3, 1, now() FROM generate_series(0, 1) r"
                "  RETURNING id, request_id),"
                " m AS (INSERT INTO metrics (trial_id, metric_group, steps_completed, metrics)"
                "  SELECT id, 'validation', s, jsonb_build_object('validation_loss',"
                "   $2::float8 + request_id * 0.1 + 1.0 / s, 'accuracy', 1 - 1.0 / s)"
                "   || CASE WHEN $4 THEN '{\"f1\": 0.5}'::jsonb ELSE '{}' END"
                "  FROM t, generate_series(1, $3) s)"
                " SELECT array_agg(id ORDER BY request_id) FROM t",
                experiment_id, 0.01 * (i + 1), STEPS, i == 21)
            await conn.execute("SELECT refresh_best_validation($1::int[])", trials)
            ids.append(experiment_id)
        return ids

    return on_database(db_url, seed)


@pytest.fixture(scope="module")
def seeded(cluster: Cluster) -> tuple[str, list[int]]:
    tag = uuid.uuid4().hex[:6]
    return tag, seed_experiments(cluster.env["EPOCHAL_DB_URL"], tag, COUNT)


def test_list_sorts_searches_on_the_server_and_restores_from_its_address(
    admin: BrowserContext, seeded: tuple[str, list[int]]
) -> None:
    tag, ids = seeded
    page, errors = opened(admin, "/")
    expect(page.locator("tr.experiment-row").first).to_be_visible()

    # Search is the server's: the pager counts only the matches (59: n05 is archived).
    page.fill("#text-filter", f"lst{tag}")
    expect(page.locator("#experiments-range")).to_have_text("1-50 of 59")
    page.fill("#text-filter", f"lst{tag}-n1")
    expect(page.locator("#experiments-range")).to_have_text("1-10 of 10")
    page.fill("#text-filter", f"LST{tag}")
    expect(page.locator("#experiments-range")).to_have_text("1-50 of 59")

    # A header sorts all 59 on the server: longest first, then shortest first.
    page.click("th button[data-sort='SORT_BY_DURATION']")
    expect(page.locator("th button[data-sort='SORT_BY_DURATION']")).to_have_attribute(
        "aria-sort", "descending")
    expect(page.locator("tr.experiment-row").first).to_have_attribute("data-id", str(ids[59]))
    page.click("th button[data-sort='SORT_BY_DURATION']")
    expect(page.locator("tr.experiment-row").first).to_have_attribute("data-id", str(ids[0]))
    expect(page.locator("tr.experiment-row").nth(5)).to_have_attribute("data-id", str(ids[6]))

    # Show archived: 60, n05 among them, marked.
    page.check("#show-archived")
    expect(page.locator("#experiments-range")).to_have_text("1-50 of 60")
    archived = page.locator(f"tr.experiment-row[data-id='{ids[5]}']")
    expect(archived).to_have_class("experiment-row archived")
    expect(archived).to_contain_text("archived")

    # Columns: Labels shown, Owner hidden; then the second page.
    page.click("#experiment-columns summary")
    page.check("#experiment-columns input[data-column='labels']")
    page.uncheck("#experiment-columns input[data-column='owner']")
    expect(page.locator("th button[data-sort='SORT_BY_LABELS']")).to_have_count(1)
    expect(page.locator("th button[data-sort='SORT_BY_USER']")).to_have_count(0)
    page.click("#experiments-next")
    expect(page.locator("#experiments-range")).to_have_text("51-60 of 60")
    expect(page.locator("tr.experiment-row").first).to_have_attribute("data-id", str(ids[50]))
    screenshot(page, "experiments-list-sorted")

    # The address holds the view: a new page opens the same one.
    address = page.url
    assert "sort=SORT_BY_DURATION" in address and "archived=true" in address, address
    copy, copy_errors = opened(admin, address)
    expect(copy.locator("#experiments-range")).to_have_text("51-60 of 60")
    expect(copy.locator("tr.experiment-row").first).to_have_attribute("data-id", str(ids[50]))
    expect(copy.locator("#text-filter")).to_have_value(f"LST{tag}")
    expect(copy.locator("#show-archived")).to_be_checked()
    expect(copy.locator("th button[data-sort='SORT_BY_DURATION']")).to_have_attribute(
        "aria-sort", "ascending")
    expect(copy.locator("th button[data-sort='SORT_BY_USER']")).to_have_count(0)
    expect(copy.locator("th button[data-sort='SORT_BY_LABELS']")).to_have_count(1)
    copy.close()
    page.close()
    assert not errors and not copy_errors, errors + copy_errors


def test_workspace_and_project_pages_and_the_project_column(
    admin: BrowserContext, cluster: Cluster, seeded: tuple[str, list[int]]
) -> None:
    tag, ids = seeded
    api = httpx.Client(base_url=cluster.url, headers=cluster.headers, timeout=30)
    workspace = api.post("/api/v1/workspaces", json={"name": f"ws{tag}"}).json()["workspace"]
    project = api.post(f"/api/v1/workspaces/{workspace['id']}/projects", json={
        "name": f"pr{tag}", "description": "the lr sweep"}).json()["project"]
    for experiment_id in ids[:3]:
        moved = api.post(f"/api/v1/experiments/{experiment_id}/move",
                         json={"destinationProjectId": project["id"]})
        assert moved.status_code == 200, moved.text

    hidden = api.post("/api/v1/workspaces", json={"name": f"old{tag}"}).json()["workspace"]
    assert api.post(f"/api/v1/workspaces/{hidden['id']}/archive").status_code == 200

    page, errors = opened(admin, "/")
    page.click("header nav a[href='/workspaces']")
    row = page.locator(f"tr.workspace-row[data-id='{workspace['id']}']")
    expect(row).to_contain_text(f"ws{tag}")
    expect(row.locator("td.num")).to_have_text(["1", "3"])
    archived = page.locator(f"tr.workspace-row[data-id='{hidden['id']}']")
    expect(archived).to_have_count(0)
    page.check("#show-archived-workspaces")
    expect(archived).to_have_class("workspace-row archived")
    page.uncheck("#show-archived-workspaces")
    expect(archived).to_have_count(0)
    row.locator("a").click()

    expect(page).to_have_url(re.compile(rf"/workspaces/{workspace['id']}$"))
    project_row = page.locator(f"tr.project-row[data-id='{project['id']}']")
    expect(project_row).to_contain_text("the lr sweep")
    expect(project_row.locator("td.num").first).to_have_text("3")
    expect(page.locator("#members")).to_contain_text("admin")
    page.fill("#project-name", f"second{tag}")
    page.click("#create-project button[type='submit']")
    expect(page.locator("tr.project-row")).to_have_count(2)
    expect(page.locator("#workspace-summary")).to_have_text(
        "owner admin · 2 projects · 3 experiments")
    page.fill("#project-name", f"second{tag}")  # a taken name: the API's refusal, shown
    page.click("#create-project button[type='submit']")
    expect(page.locator("#project-error")).to_contain_text("already exists")
    screenshot(page, "workspace")

    project_row.locator("a").first.click()
    expect(page.locator("#project-description")).to_have_text("the lr sweep")
    expect(page.locator("tr.experiment-row")).to_have_count(3)
    expect(page.locator("#experiments-range")).to_have_text("1-3 of 3")

    # The home list: the Project column links there; the project filter keeps its three.
    page.goto("/")
    link = page.locator(f"tr.experiment-row[data-id='{ids[0]}'] a[href='/projects/"
                        f"{project['id']}']")
    page.fill("#text-filter", f"lst{tag}-n00")
    expect(link).to_have_text(f"pr{tag}")

    # Bulk actions: two more moved into the project, one archived (gone from the list).
    page.fill("#text-filter", f"lst{tag}-n0")
    expect(page.locator("#experiments-range")).to_have_text("1-9 of 9")  # n05 is archived
    for i in (3, 4):
        page.check(f"tr.experiment-row[data-id='{ids[i]}'] input.select-experiment")
    page.select_option("#move-selected", str(project["id"]))
    expect(page.locator(f"tr.experiment-row[data-id='{ids[4]}'] a[href='/projects/"
                        f"{project['id']}']")).to_have_count(1)
    page.check(f"tr.experiment-row[data-id='{ids[7]}'] input.select-experiment")
    page.click("#archive-selected")
    expect(page.locator("#experiments-range")).to_have_text("1-8 of 8")

    page.fill("#text-filter", "")
    page.select_option("#project-filter", str(project["id"]))
    expect(page.locator("#experiments-range")).to_have_text("1-5 of 5")
    assert f"project={project['id']}" in page.url

    # A workspace that does not exist: the API's answer, not a broken page.
    missing, missing_errors = opened(admin, "/workspaces/987654")
    expect(missing.locator("#main .error")).to_contain_text("987654")
    page.close()
    missing.close()
    assert not errors and not missing_errors, errors + missing_errors


def test_compare_overlays_curves_and_tables_trials_with_what_differs(
    admin: BrowserContext, seeded: tuple[str, list[int]]
) -> None:
    tag, ids = seeded
    page, errors = opened(admin, "/")
    page.fill("#text-filter", f"lst{tag}-n2")  # n20..n29
    expect(page.locator("#experiments-range")).to_have_text("1-10 of 10")
    for experiment_id in (ids[20], ids[21], ids[22]):
        page.check(f"tr.experiment-row[data-id='{experiment_id}'] input.select-experiment")
    expect(page.locator("#selected-count")).to_have_text("3 selected")
    page.click("#compare-selected")

    expect(page).to_have_url(re.compile(r"/compare\?experiments=\d+(%2C|,)\d+(%2C|,)\d+$"))
    curves = page.locator("#compare-curves")
    expect(curves).to_have_attribute("data-metric", "validation_loss")
    expect(curves).to_have_attribute("data-experiments", "3")
    expect(page.locator("#compare-experiments a")).to_have_text(
        [f"{ids[i]} lst{tag}-n{i}" for i in (20, 21, 22)])
    # One colour per experiment, each trial a line; one legend entry per experiment.
    colours = page.evaluate("() => document.querySelector('#compare-curves').data"
                            ".map((t) => t.line.color)")
    assert len(colours) == 6 and len(set(colours)) == 3, colours
    assert page.evaluate("() => document.querySelector('#compare-curves').data"
                         ".filter((t) => t.showlegend).length") == 3

    # lr differs by experiment, layers by trial: both shown, each best trial marked.
    expect(page.locator("#compare-differ code")).to_have_text(["layers", "lr"])
    expect(page.locator("tr.compare-row")).to_have_count(6)
    expect(page.locator("tr.compare-row.best-trial")).to_have_count(3)
    # Sorted by best value (ascending): experiment n20's first trial (lr 0.21) leads.
    expect(page.locator("tr.compare-row").first).to_have_attribute(
        "data-experiment", str(ids[20]))
    page.click("#compare-trials th button[data-sort='hp.lr']")
    page.click("#compare-trials th button[data-sort='hp.lr']")  # descending
    expect(page.locator("tr.compare-row").first).to_have_attribute(
        "data-experiment", str(ids[22]))
    # The metrics all three report (f1 is n21's alone): the searcher's first.
    expect(page.locator("#compare-metric option")).to_have_text(["validation_loss", "accuracy"])
    page.select_option("#compare-metric", "accuracy")
    expect(curves).to_have_attribute("data-metric", "accuracy")
    screenshot(page, "compare-experiments")

    # The address restores the comparison and its sort in a new page.
    copy, copy_errors = opened(admin, page.url)
    expect(copy.locator("#compare-curves")).to_have_attribute("data-experiments", "3")
    expect(copy.locator("tr.compare-row").first).to_have_attribute(
        "data-experiment", str(ids[22]))
    expect(copy.locator("#compare-metric")).to_have_value("accuracy")
    expect(copy.locator("#compare-curves")).to_have_attribute("data-metric", "accuracy")
    bad, bad_errors = opened(admin, f"/compare?experiments={ids[20]}")
    expect(bad.locator("#main .error")).to_contain_text("Choose 2 to 10")
    for p in (page, copy, bad):
        p.close()
    assert not errors and not copy_errors and not bad_errors
