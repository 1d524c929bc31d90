"""The dashboard in headless Chromium against a live cluster running a real two-trial grid:
log in, list, learning curves, trials table, hyperparameter scatter, pause and activate, a
trial's live logs and checkpoints, the cluster page and its job queue's moves, the experiment
followed live to its end, and the model registry's pages.

Tests run in file order on one experiment (pause/activate before it completes). A screenshot
of every page goes to test-artifacts/screenshots/.
"""

from __future__ import annotations

import base64
import re
import tarfile
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest
import yaml
from playwright.sync_api import Browser, BrowserContext, Page, expect
from temporalio.client import Client

from tests.browser.conftest import (
    ADMIN,
    LEARNING_RATES,
    SPARE_POOL,
    STEPS,
    TIMEOUT_MS,
    USER_PASSWORD,
    api_get,
    in_thread,
    log_in,
    new_user,
    on_database,
    opened,
    screenshot,
    signed_in,
)
from tests.e2e.cluster import SLOW_MODEL, Cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

T = TypeVar("T")

@pytest.fixture(scope="module")
def logged_in(
    context: BrowserContext, cluster: Cluster, experiment_id: int
) -> Iterator[BrowserContext]:
    """The module's browser context after logging in through /login (token kept by the page)."""
    page = context.new_page()
    page.goto(f"/experiments/{experiment_id}")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fexperiments%2F\d+$"))
    log_in(page, cluster.secrets["admin_password"])
    expect(page).to_have_url(re.compile(rf"/experiments/{experiment_id}$"))
    expect(page.locator("#whoami")).to_have_text(ADMIN)
    page.close()
    yield context


def chart_points(page: Page, selector: str, at_least: int = 2) -> int:
    """Wait until the chart at `selector` has drawn `at_least` points; return how many."""
    page.wait_for_function(
        "([sel, n]) => Number(document.querySelector(sel)?.dataset.points || 0) >= n",
        arg=[selector, at_least],
    )
    return int(page.locator(selector).get_attribute("data-points") or 0)


def test_experiment_list_shows_and_filters(
    logged_in: BrowserContext, experiment_id: int
) -> None:
    page = logged_in.new_page()
    page.goto("/")
    row = page.locator(f"tr.experiment-row[data-id='{experiment_id}']")
    expect(row).to_contain_text("browser-grid")
    expect(row).to_contain_text(ADMIN)
    expect(row.locator(".state")).to_have_text("ACTIVE")
    screenshot(page, "experiments")

    page.fill("#text-filter", "no-such-experiment")
    expect(row).to_have_count(0)
    page.fill("#text-filter", "browser")
    expect(row).to_have_count(1)
    page.select_option("#state-filter", "STATE_COMPLETED")
    expect(row).to_have_count(0)
    page.select_option("#state-filter", "STATE_ACTIVE")
    expect(row).to_have_count(1)

    row.locator("a", has_text="browser-grid").click()
    expect(page).to_have_url(re.compile(rf"/experiments/{experiment_id}$"))
    page.close()


# These two pause and resume the fixture's experiment, so they come early (after the list,
# which shows it ACTIVE too): it runs for about 30 s after the fixture returns, and under load
# the page tests that once came before them outlasted it.
def test_pause_and_activate_buttons_change_the_state(
    logged_in: BrowserContext, cluster: Cluster, experiment_id: int
) -> None:
    def checkpointed() -> bool:  # so each resumes from a checkpoint (the trial page shows it)
        trials = api_get(cluster, f"/api/v1/experiments/{experiment_id}/trials")["trials"]
        return all(t.get("latestCheckpointUuid") for t in trials)

    wait_for(checkpointed, timeout=60, what="every trial's first checkpoint")
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    state = page.locator("#experiment-header h1 .state")
    expect(state).to_have_text("ACTIVE")

    page.click("button[data-action='pause']")
    expect(state).to_have_text("PAUSED", timeout=TIMEOUT_MS)
    expect(page.locator("button[data-action='activate']")).to_be_enabled()
    expect(page.locator("button[data-action='pause']")).to_be_disabled()
    exp = api_get(cluster, f"/api/v1/experiments/{experiment_id}")["experiment"]
    assert exp["state"] == "STATE_PAUSED"
    # The paused trials checkpoint and stop; the stream shows it.
    expect(page.locator("tr.trial-row[data-state='PAUSED']")).to_have_count(
        len(LEARNING_RATES), timeout=60_000
    )
    screenshot(page, "experiment-paused")

    page.click("button[data-action='activate']")
    expect(state).to_have_text("ACTIVE")
    exp = api_get(cluster, f"/api/v1/experiments/{experiment_id}")["experiment"]
    assert exp["state"] == "STATE_ACTIVE"
    page.click("#tab-trials")
    expect(page.locator("tr.trial-row[data-state='RUNNING']").first).to_be_visible(
        timeout=60_000
    )
    page.close()


def test_trial_page_shows_curves_live_logs_and_checkpoints(
    logged_in: BrowserContext, cluster: Cluster, experiment_id: int
) -> None:
    trials = api_get(cluster, f"/api/v1/experiments/{experiment_id}/trials")["trials"]
    trial = trials[0]
    page = logged_in.new_page()
    page.goto(f"/trials/{trial['id']}")
    expect(page.locator("#trial-header h1")).to_contain_text(f"Trial {trial['id']}")
    expect(page.locator("#trial-hparams tr[data-name='lr'] td.hp-value")).to_have_text(
        str(trial["hparams"]["lr"]))

    chart_points(page, "#curves .line-chart", at_least=5)
    expect(page.locator("#curves")).to_have_attribute("data-metric", "loss")
    expect(page.locator("tr.checkpoint-row").first).to_be_visible()
    # A checkpoint's files download as a tar through the master (shared_fs here, S3 alike).
    with page.expect_download() as download:
        page.locator("tr.checkpoint-row a.download").first.click()
    with tarfile.open(download.value.path()) as archive:
        assert {"state.json", "metadata.json"} <= set(archive.getnames())

    logs = page.locator("#logs")
    expect(logs).to_contain_text("checkpoint at step")
    expect(logs).to_contain_text("resumed from checkpoint")  # the run after activate
    # New lines arrive while the page stays open (the trial is still training).
    lines_now = int(logs.get_attribute("data-lines") or 0)
    page.wait_for_function(
        "([n]) => Number(document.querySelector('#logs').dataset.lines) > n", arg=[lines_now]
    )
    screenshot(page, "trial")
    page.close()


def test_wrong_password_is_refused_on_the_login_page(chromium: Browser, cluster: Cluster) -> None:
    ctx = chromium.new_context(base_url=cluster.url)
    try:
        page = ctx.new_page()
        page.goto("/")
        expect(page).to_have_url(re.compile(r"/login\?next=%2F$"))
        log_in(page, "not-the-password")
        expect(page.locator("#login-error")).to_contain_text("invalid username or password")
        expect(page).to_have_url(re.compile(r"/login"))
        screenshot(page, "login")
    finally:
        ctx.close()


def test_experiment_page_draws_curves_trials_and_scatter(
    logged_in: BrowserContext, experiment_id: int
) -> None:
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    rows = page.locator("tr.trial-row")
    expect(rows).to_have_count(len(LEARNING_RATES))
    page.click("#tab-trials")
    for hparam in ("lr", "sleep", "checkpoint_every"):  # a column per hyperparameter
        expect(page.get_by_role("columnheader", name=hparam, exact=True)).to_have_count(1)
    page.click("#tab-overview")

    # Validation curves first (the searcher metric), one line per trial.
    chart_points(page, "#curves .line-chart", at_least=2 * len(LEARNING_RATES))
    expect(page.locator("#curves .line-chart")).to_have_attribute(
        "data-series", str(len(LEARNING_RATES)))
    expect(page.locator("#curves")).to_have_attribute("data-metric", "validation_loss")

    page.click("#curves button[data-group='training']")
    expect(page.locator("#curves")).to_have_attribute("data-group", "training")
    expect(page.locator("#curves")).to_have_attribute("data-metric", "loss")
    training = chart_points(page, "#curves .line-chart", at_least=10)
    drawn = page.evaluate("() => document.querySelector('#curves .line-chart').data"
                          ".map((t) => [t.mode, t.x.length])")
    assert all(mode == "lines" and n >= 5 for mode, n in drawn), drawn  # polylines, not dots

    # The scatter starts on the hyperparameter that differs between trials.
    expect(page.locator("#hp-select")).to_have_value("lr")
    chart_points(page, "#hp-scatter", at_least=len(LEARNING_RATES))
    expect(page.locator("#hp-scatter")).to_have_attribute("data-points", str(len(LEARNING_RATES)))

    # Live: the trials table moves on without a reload.
    page.click("#tab-trials")
    batches = page.locator("tr.trial-row td.batches").first
    before = int(batches.inner_text())
    page.wait_for_function(
        "([n]) => Number(document.querySelector('tr.trial-row td.batches').textContent) > n",
        arg=[before],
    )
    assert training >= 10
    screenshot(page, "experiment-running")
    page.close()


def test_the_experiment_and_trial_pages_link_their_workflows_in_temporals_ui(
    logged_in: BrowserContext, cluster: Cluster, experiment_id: int, temporal_ui_url: str | None
) -> None:
    """Each page links its workflow in Temporal's own UI, which opens on it; the experiment's
    memo there links back to its page."""
    if temporal_ui_url is None:
        pytest.skip("the external Temporal's UI is not given (EPOCHAL_TEST_TEMPORAL_UI_URL)")
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    link = page.locator("#experiment-header a.workflow-link")
    expect(link).to_have_attribute("href", re.compile(
        rf"^{re.escape(temporal_ui_url)}/namespaces/{cluster.temporal_namespace}/workflows\?"
        rf"query=WorkflowId%3D%22experiment-{experiment_id}%22$"))
    with logged_in.expect_page() as opened:
        link.click()
    ui = opened.value
    expect(ui.get_by_text(f"experiment-{experiment_id}", exact=True).first).to_be_visible(
        timeout=60_000)
    screenshot(ui, "temporal-ui-experiment")
    ui.close()

    [trial, *_] = api_get(cluster, f"/api/v1/experiments/{experiment_id}/trials")["trials"]
    page.goto(f"/trials/{trial['id']}")
    expect(page.locator("#trial-header a.workflow-link")).to_have_attribute("href", re.compile(
        rf"query=WorkflowId%3D%22experiment-{experiment_id}-trial-{trial['id']}%22$"))
    page.close()

    async def memo() -> dict[str, Any]:
        client = await Client.connect(cluster.temporal_address,
                                      namespace=cluster.temporal_namespace)
        described = await client.get_workflow_handle(f"experiment-{experiment_id}").describe()
        return await described.memo()

    assert in_thread(memo)["dashboard"] == f"{cluster.url}/experiments/{experiment_id}"


def test_an_unmanaged_experiment_is_marked_and_cannot_be_paused_from_the_page(
    logged_in: BrowserContext, cluster: Cluster, tmp_path: Path
) -> None:
    """A detached run (Determined's core_v2, its calls made here as its script makes them) is
    listed and shown with a badge that says the cluster did not run it; no Temporal workflow
    is linked and the page offers no pause."""
    config = ("name: detached-in-browser\nsearcher: {name: single, metric: unmanaged}\n"
              f"checkpoint_storage: {{type: directory, container_path: {tmp_path}}}\n")

    def call(method: str, path: str, body: dict[str, Any]) -> Any:
        answer = httpx.request(method, cluster.url + path, json=body, headers=cluster.headers,
                               timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()

    experiment = call("POST", "/api/v1/experiments", {"config": config, "unmanaged": True})
    experiment_id = experiment["experiment"]["id"]
    trial = call("POST", "/api/v1/trials", {"experimentId": experiment_id, "unmanaged": True})
    call("POST", f"/api/v1/trials/{trial['trial']['id']}/start", {"resume": True})
    call("PATCH", f"/api/v1/trials/{trial['trial']['id']}", {"state": "STATE_RUNNING"})

    page = logged_in.new_page()
    page.goto("/")
    row = page.locator(f"tr.experiment-row[data-id='{experiment_id}']")
    expect(row.locator(".unmanaged")).to_have_text("unmanaged")
    page.goto(f"/experiments/{experiment_id}")
    expect(page.locator("#experiment-header .unmanaged")).to_have_text("unmanaged")
    expect(page.locator("#experiment-header h1 .state")).to_have_text("ACTIVE")
    expect(page.locator("button[data-action='pause']")).to_be_disabled()
    expect(page.locator("button[data-action='kill']")).to_be_enabled()
    expect(page.locator("#experiment-header a.workflow-link")).to_have_count(0)
    screenshot(page, "experiment-unmanaged")
    page.close()


def test_cluster_page_shows_the_agent_slots_and_queue(
    logged_in: BrowserContext, experiment_id: int
) -> None:
    page = logged_in.new_page()
    page.goto("/cluster")
    agent = page.locator("tr.agent-row")
    expect(agent).to_have_count(1)
    expect(agent).to_contain_text("alive")
    expect(agent).to_contain_text("/ 2")
    expect(page.locator("tr.slot-row")).to_have_count(2)
    expect(page.locator("#queue h2")).to_contain_text("Job queue")
    screenshot(page, "cluster")
    page.close()


def test_experiment_page_follows_the_experiment_to_its_end(
    logged_in: BrowserContext, cluster: Cluster, experiment_id: int
) -> None:
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    expect(page.locator("#experiment-header h1 .state")).to_have_text(
        "COMPLETED", timeout=180_000
    )
    expect(page.locator("tr.trial-row[data-state='COMPLETED']")).to_have_count(len(LEARNING_RATES))
    expect(page.locator("button[data-action='pause']")).to_be_disabled()
    # Every validation (one per checkpoint, every 5 batches) of both trials is on the chart.
    chart_points(page, "#curves .line-chart", at_least=len(LEARNING_RATES) * STEPS // 5)
    expect(page.locator("#experiment-header .progress")).to_contain_text("100%")
    screenshot(page, "experiment")

    page.goto("/")
    row = page.locator(f"tr.experiment-row[data-id='{experiment_id}']")
    expect(row.locator(".state")).to_have_text("COMPLETED")
    expect(row).to_contain_text("validation_loss")
    page.close()


def seed_failed_trial(db_url: str) -> tuple[int, int]:
    """An experiment that ended in ERROR: one trial, whose last lines are a traceback (stderr,
    level ERROR) after a line carrying the training code's own timestamp."""
    async def seed(conn: asyncpg.Connection) -> tuple[int, int]:
        config = {"name": "failing", "entrypoint": "python3 train.py",
                  "searcher": {"name": "single", "metric": "loss",
                               "max_length": {"batches": 1}},
                  "resources": {"resource_pool": "default"}}
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner,"
            " planned_trials, end_time) VALUES ('failing', $1, '', 1, 'ERROR', 'admin', 1,"
            " now()) RETURNING id", config)
        trial_id = await conn.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state, end_time)"
            " VALUES ($1, 0, '{}', 1, 'ERROR', now()) RETURNING id", experiment_id)
        lines = [("stdout", "INFO", "2026-11-25 10:00:00,123 INFO loading the digits\n"),
                 ("stdout", "INFO", "[rank=0] chief ready\n"),
                 ("stdout", "INFO", "[rank=1] worker ready\n"),
                 ("stderr", "WARNING", "the learning rate is high\n"),
                 ("stderr", "ERROR", "Traceback (most recent call last):\n"),
                 ("stderr", "ERROR", "ValueError: loss is NaN at batch 12\n")]
        await conn.executemany(
            "INSERT INTO task_logs (trial_id, task_id, stdtype, level, log)"
            " VALUES ($1, $2, $3, $4, $5)",
            [(trial_id, f"{experiment_id}.{trial_id}", std, level, text)
             for std, level, text in lines])
        return experiment_id, trial_id

    return on_database(db_url, seed)


def test_an_experiment_whose_sampler_failed_says_so(
    logged_in: BrowserContext, cluster: Cluster
) -> None:
    """No trial failed: the experiment's own reason is shown (its searcher's sampler failed)."""
    async def seed(conn: asyncpg.Connection) -> int:
        config = {"name": "sampling", "entrypoint": "python3 train.py",
                  "searcher": {"name": "optuna", "metric": "loss", "max_trials": 4,
                               "max_length": {"batches": 1}},
                  "resources": {"resource_pool": "default"}}
        experiment_id: int = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner,"
            " planned_trials, end_time, error) VALUES ('sampling', $1, '', 1, 'ERROR', 'admin',"
            " 4, now(), $2) RETURNING id", config, "searcher.sampler 'tpe' failed: TypeError")
        return experiment_id

    experiment_id = on_database(cluster.env["EPOCHAL_DB_URL"], seed)
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    expect(page.locator("#experiment-error .error-summary")).to_have_text(
        "The experiment ended in ERROR: searcher.sampler 'tpe' failed: TypeError")


def test_a_failure_says_why_and_the_logs_filter(
    logged_in: BrowserContext, cluster: Cluster
) -> None:
    """An experiment in ERROR shows its failing trial and error lines at the top; the trial's
    logs show one timestamp a line, colour by level, search, filter by level and rank, and
    download."""
    experiment_id, trial_id = seed_failed_trial(cluster.env["EPOCHAL_DB_URL"])
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    summary = page.locator("#experiment-error .error-summary")
    expect(summary).to_contain_text("The experiment ended in ERROR")
    expect(summary).to_contain_text("ValueError: loss is NaN at batch 12")
    expect(summary.locator(f"a[href='/trials/{trial_id}']")).to_be_visible()
    expect(page.locator("#experiment-header .progress")).to_contain_text("0%")

    summary.locator("a").click()
    expect(page.locator("#trial-error .error-summary")).to_contain_text("loss is NaN")
    lines = page.locator("#logs .log-line")
    expect(lines).to_have_count(6)
    first = lines.first.inner_text().strip()
    assert "2026-11-25" not in first and first.endswith("INFO loading the digits"), first
    expect(lines.nth(5).locator(".level-error")).to_have_count(1)
    expect(lines.nth(3).locator(".level-warning")).to_have_count(1)
    page.fill("#log-search", "nan")
    expect(page.locator("#logs .log-line:visible")).to_have_count(1)
    page.fill("#log-search", "")
    page.select_option("#log-rank", "1")
    expect(page.locator("#logs .log-line:visible")).to_have_text(re.compile("worker ready"))
    page.select_option("#log-rank", "")
    page.select_option("#log-level", "LOG_LEVEL_WARNING")
    expect(page.locator("#logs .log-line:visible")).to_have_count(3)
    with page.expect_download() as download:
        page.click("#log-download")
    saved = Path(download.value.path()).read_text()
    assert saved.count("\n") == 6 and "ERROR ValueError: loss is NaN at batch 12" in saved
    screenshot(page, "trial-error")
    page.close()


# A short run's system samples (ms since the epoch): three over 9 seconds.
SAMPLE_MS = [1_795_000_000_000, 1_795_000_004_500, 1_795_000_009_000]


def seed_trial_history(db_url: str) -> tuple[int, int, str]:
    """A finished trial with nested hyperparameters, training metrics every batch and validations
    every 5 (the best, 0.3, at batch 10; the latest 0.4), 20 checkpoints of which GC deleted 19,
    and three system samples over 9 s; and a second trial of the same experiment with one system
    sample. Returns both trials' ids and the kept checkpoint's uuid."""
    async def seed(conn: asyncpg.Connection) -> tuple[int, int, str]:
        config = {"name": "history", "entrypoint": "python3 train.py",
                  "searcher": {"name": "random", "metric": "validation_loss", "max_trials": 2,
                               "max_length": {"batches": 20}},
                  "resources": {"resource_pool": "default"},
                  "hyperparameters": {"lr": {"type": "log", "minval": -4, "maxval": -1},
                                      "optimizer": {"name": "adam", "momentum": 0.9,
                                                    "betas": [0.9, 0.999]},
                                      "width": 123456789}}
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner,"
            " planned_trials, end_time) VALUES ('history', $1, '', 1, 'COMPLETED', 'admin', 2,"
            " now()) RETURNING id", config)
        hparams = {"lr": 0.0031622776601683794, "width": 123456789,
                   "optimizer": {"name": "adam", "momentum": 0.9, "betas": [0.9, 0.999]}}
        trial_id, other_id = [await conn.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, state,"
            " steps_completed, progress, end_time) VALUES ($1, $2, $3, 1, 'COMPLETED', 20, 1,"
            " now()) RETURNING id", experiment_id, request, hparams) for request in (0, 1)]
        validations = {5: 0.5, 10: 0.3, 15: 0.35, 20: 0.4}
        rows = [(trial_id, "training", s, {"loss": 1 / s, "lr_now": 0.001}) for s in range(1, 21)]
        rows += [(trial_id, "validation", s, {"validation_loss": v, "accuracy": 1 - v})
                 for s, v in validations.items()]
        rows += [(trial_id, "system", ms, {"cpu_util_percent": 50.0 + i, "memory_rss_bytes": 1e9})
                 for i, ms in enumerate(SAMPLE_MS)]
        rows += [(other_id, "system", SAMPLE_MS[0], {"cpu_util_percent": 80.0})]
        await conn.executemany(
            "INSERT INTO metrics (trial_id, metric_group, steps_completed, metrics)"
            " VALUES ($1, $2, $3, $4)", rows)
        await conn.execute("SELECT refresh_best_validation($1::int[])", [trial_id, other_id])
        kept: str = await conn.fetchval(
            "WITH c AS (INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id,"
            "  steps_completed, storage_path, state)"
            " SELECT gen_random_uuid(), $1, $2, $2, s, 'nowhere',"
            "  CASE WHEN s = 20 THEN 'COMPLETED' ELSE 'DELETED' END"
            " FROM generate_series(1, 20) s RETURNING uuid, state)"
            " SELECT uuid::text FROM c WHERE state = 'COMPLETED'",
            trial_id, f"{experiment_id}.{trial_id}")
        return trial_id, other_id, kept

    return on_database(db_url, seed)


def system_axis(page: Page) -> dict[str, Any]:
    """What the system chart drew: its x axis (type, range as ms since the epoch, read as the
    browser's clock time as plotly shows it) and its samples' times and mode."""
    page.wait_for_function(
        "() => Number(document.querySelector('#system .chart-box')?.dataset.points || 0) > 0")
    axis: dict[str, Any] = page.evaluate("""() => {
        const box = document.querySelector('#system .chart-box');
        const ms = (t) => new Date(String(t).replace(' ', 'T')).getTime();
        const x = box._fullLayout.xaxis;
        return { type: x.type, range: x.range.map(ms), samples: box.data[0].x.map(ms),
                 mode: box.data[0].mode };
    }""")
    return axis


def test_the_trial_page_reads_well(logged_in: BrowserContext, cluster: Cluster) -> None:
    """Issue 37 item 12: the trial's hyperparameters are a table (nested names dotted, numbers
    whole), its metrics summed up (each one's latest value, the best validation with its batch),
    its kept checkpoint listed first and the 19 deleted ones folded away behind their count, and a
    9-second run's system samples drawn at their clock time on an axis of about 10 s (one
    sample: a marker at its time, not a point on -1..1)."""
    trial_id, other_id, kept = seed_trial_history(cluster.env["EPOCHAL_DB_URL"])
    page = logged_in.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(f"/trials/{trial_id}")

    hparams = page.locator("#trial-hparams tr.hparam-row")
    expect(hparams).to_have_count(5)
    values = {"lr": "0.0031622776601683794", "optimizer.betas": "[0.9,0.999]",
              "optimizer.momentum": "0.9", "optimizer.name": "adam", "width": "123456789"}
    for name, value in values.items():
        row = page.locator(f"#trial-hparams tr[data-name='{name}']")
        expect(row.locator("td").first).to_have_text(name)
        expect(row.locator("td.hp-value")).to_have_text(value)
    # Whole: every value on one line.
    lines = page.evaluate("""() => [...document.querySelectorAll('#trial-hparams td.hp-value')]
        .map((cell) => {
            const range = document.createRange();
            range.selectNodeContents(cell);
            return range.getClientRects().length;
        })""")
    assert lines == [1] * len(values), lines

    expect(page.locator("#trial-best")).to_have_text("best validation_loss 0.3 at batch 10")
    metrics = page.locator("#trial-metrics")
    for group, name, latest in (("validation", "validation_loss", "0.4"),
                                ("validation", "accuracy", "0.6"), ("training", "loss", "0.05"),
                                ("training", "lr_now", "0.001")):
        expect(metrics.locator(f"tr[data-group='{group}'][data-name='{name}'] td.latest")
               ).to_have_text(latest)
    expect(metrics.locator("tr.metric-row")).to_have_count(4)

    checkpoints = page.locator("#checkpoints tr.checkpoint-row")
    expect(page.locator("#checkpoints h2")).to_have_text("Checkpoints (1 kept, 19 deleted)")
    expect(checkpoints.first).to_have_attribute("data-uuid", kept)
    expect(checkpoints.first).to_be_visible()
    expect(page.locator("#checkpoints tr.checkpoint-row:visible")).to_have_count(1)
    deleted = page.locator("#deleted-checkpoints")
    expect(deleted.locator("summary")).to_have_text("19 deleted checkpoints")
    expect(deleted.locator("tr.checkpoint-row[data-state='DELETED']")).to_have_count(19)
    deleted.locator("summary").click()
    expect(page.locator("#checkpoints tr.checkpoint-row:visible")).to_have_count(20)

    axis = system_axis(page)
    assert axis["type"] == "date" and axis["mode"] == "lines", axis
    assert axis["samples"] == SAMPLE_MS, axis
    start, end = axis["range"]
    assert start <= SAMPLE_MS[0] and end >= SAMPLE_MS[-1], axis
    assert 9_000 < end - start <= 12_000, axis
    # The hover reads the time axis: at the middle sample, that sample alone, at its time.
    point = page.evaluate("""() => {
        const box = document.querySelector('#system .chart-box');
        const x = box._fullLayout.xaxis, size = box._fullLayout._size;
        const r = box.getBoundingClientRect();
        return { x: r.left + size.l + x.l2p(x.d2l(box.data[0].x[1])),
                 y: r.top + size.t + size.h / 2 };
    }""")
    page.mouse.move(point["x"], point["y"])
    hover = page.locator("#system .chart-box > .curve-hover")
    expect(hover.locator(".curve-hover-row")).to_have_count(1)
    expect(hover.locator(".curve-hover-step")).to_have_text(re.compile(r"^time \d\d:\d\d:\d\d$"))
    screenshot(page, "trial-summary")

    page.goto(f"/trials/{other_id}")
    axis = system_axis(page)
    assert axis["mode"] == "markers" and axis["samples"] == SAMPLE_MS[:1], axis
    start, end = axis["range"]
    assert start < SAMPLE_MS[0] < end and 5_000 <= end - start <= 60_000, axis
    expect(page.locator("#trial-best")).to_have_text("no validation of validation_loss yet")
    expect(page.locator("#checkpoints h2")).to_have_text("Checkpoints (0 kept)")
    assert not errors, errors
    page.close()


def test_no_page_asks_for_what_the_master_does_not_serve(
    logged_in: BrowserContext, experiment_id: int
) -> None:
    """Every page loads its icon, scripts and styles: nothing it asks for answers 404 (a missing
    favicon was one on every page)."""
    page = logged_in.new_page()
    missing: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)
    for path in ("/", f"/experiments/{experiment_id}", "/tasks", "/cluster", "/models"):
        page.goto(path)
        page.wait_for_load_state("load")
    icon = page.evaluate("document.querySelector(\"link[rel='icon']\").href")
    assert page.request.get(icon).ok, icon
    assert missing == []
    page.close()


def test_the_pages_use_a_wide_screens_width(
    chromium: Browser, cluster: Cluster, experiment_id: int
) -> None:
    """On a 1,600 px screen the experiment page and its charts use the width (they were held
    at about 1,090 px)."""
    ctx = chromium.new_context(base_url=cluster.url, viewport={"width": 1600, "height": 900})
    page = ctx.new_page()
    page.goto("/")
    log_in(page, cluster.secrets["admin_password"])
    expect(page.locator("#whoami")).to_have_text(ADMIN)
    page.goto(f"/experiments/{experiment_id}")
    chart = page.locator("#curves .chart-box").first
    expect(chart).to_be_visible()
    main = page.locator("main").bounding_box()
    drawn = chart.bounding_box()
    assert main and main["width"] >= 1550, main
    assert drawn and drawn["width"] >= 1450, drawn
    ctx.close()


def test_a_banner_says_when_the_master_stops_answering(
    logged_in: BrowserContext, experiment_id: int
) -> None:
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    expect(page.locator("#experiment-header h1")).to_be_visible()
    ask = "() => import('/static/api.js').then((m) => m.api('/api/v1/me')).catch(() => null)"
    page.route("**/api/v1/**", lambda route: route.abort())  # the master is gone
    page.evaluate(ask)  # what the page's next poll or action does
    expect(page.locator("#offline-banner")).to_contain_text("The master is not answering")
    expect(page.locator("body")).to_have_attribute("data-offline", "true")
    expect(page.locator("button[data-action='archive']")).to_have_css("pointer-events", "none")
    page.unroute("**/api/v1/**")
    page.evaluate(ask)
    expect(page.locator("#offline-banner")).to_have_count(0)
    page.close()


def test_experiment_details_are_edited_and_its_files_shown(
    logged_in: BrowserContext, cluster: Cluster, experiment_id: int
) -> None:
    """On the ended experiment: its config and model files, labels and notes saved in place,
    archive and unarchive; a second experiment renamed and deleted."""
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    page.click("#tab-config")
    page.click("#config summary")
    expect(page.locator("#config-yaml")).to_contain_text("name: browser-grid")
    page.click("#model-files summary")
    page.click("a.model-file[data-path='train.py']")
    expect(page.locator("#model-file")).to_contain_text("import")
    assert (page.locator("#model-file").inner_text().strip()
            == (SLOW_MODEL / "train.py").read_text().strip())

    page.click("#tab-notes")
    page.fill("#exp-labels", "browser, grid")
    page.fill("#exp-notes", "lr 0.03 learns slowly")
    page.click("#details-save")
    expect(page.locator("#details-status")).to_have_text("saved")
    expect(page.locator("#experiment-header .labels .label")).to_have_count(2)
    shown = api_get(cluster, f"/api/v1/experiments/{experiment_id}")["experiment"]
    assert (shown["labels"], shown["notes"]) == (["browser", "grid"], "lr 0.03 learns slowly")

    page.click("button[data-action='archive']")
    expect(page.locator("button[data-action='unarchive']")).to_be_enabled()
    assert api_get(cluster, f"/api/v1/experiments/{experiment_id}")["experiment"]["archived"]
    page.click("button[data-action='unarchive']")
    expect(page.locator("button[data-action='archive']")).to_be_enabled()
    assert not api_get(cluster, f"/api/v1/experiments/{experiment_id}")["experiment"]["archived"]
    screenshot(page, "experiment-details")

    other, _ = seed_many_trials(cluster.env["EPOCHAL_DB_URL"], 3)
    page.goto(f"/experiments/{other}")
    page.click("#tab-notes")
    page.fill("#exp-name", "renamed in the browser")
    page.click("#details-save")
    expect(page.locator("#experiment-header h1 .name")).to_have_text("renamed in the browser")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[data-action='delete']")
    expect(page).to_have_url(re.compile(r"/$"))
    gone = httpx.get(f"{cluster.url}/api/v1/experiments/{other}", headers=cluster.headers,
                     timeout=30)
    assert gone.status_code == 404
    page.close()


def test_models_page_creates_a_model_and_registers_a_checkpoint(
    logged_in: BrowserContext, cluster: Cluster, experiment_id: int
) -> None:
    trials = api_get(cluster, f"/api/v1/experiments/{experiment_id}/trials")["trials"]
    checkpoints = api_get(cluster, f"/api/v1/trials/{trials[0]['id']}/checkpoints")["checkpoints"]
    uuid = next(c["uuid"] for c in checkpoints if c["state"] == "STATE_COMPLETED")
    page = logged_in.new_page()
    page.goto("/models")
    page.fill("#model-name", "browser-model")
    page.fill("#model-description", "made in the dashboard")
    page.click("#create-model button[type=submit]")
    expect(page).to_have_url(re.compile(r"/models/\d+$"))
    expect(page.locator("#model-header h1")).to_have_text("Model browser-model")

    page.fill("#checkpoint-uuid", "not-a-uuid")
    page.click("#register-version button[type=submit]")
    expect(page.locator("#register-version .error")).to_contain_text("checkpointUuid")
    page.fill("#checkpoint-uuid", uuid)
    page.fill("#version-comment", "from the browser")
    page.click("#register-version button[type=submit]")
    row = page.locator("tr.version-row[data-version='1']")
    expect(row).to_contain_text(uuid)
    expect(row).to_contain_text("from the browser")
    expect(row.locator(f"a[href='/trials/{trials[0]['id']}']")).to_be_visible()
    screenshot(page, "model")

    # "Register" from the trial's page, choosing the model: its checkpoint becomes version 2.
    page.goto(f"/trials/{trials[0]['id']}")
    row = page.locator("tr.checkpoint-row", has_text=uuid)
    row.locator("button.register-checkpoint").click()
    row.locator("select.register-model").select_option("browser-model")
    row.locator("button.register-submit").click()
    expect(row.locator("a", has_text="browser-model v2")).to_be_visible()

    page.goto("/models")
    listed = page.locator("tr.model-row", has_text="browser-model")
    expect(listed).to_contain_text("made in the dashboard")
    expect(listed.locator("td.versions")).to_have_text("2")
    expect(listed.locator("td.latest")).to_have_text("v2")
    page.close()


def seed_many_trials(db_url: str, count: int) -> tuple[int, list[int]]:
    """A finished experiment of `count` trials, each with one validation (the loss falls with
    the request id, so the last trial is the best), written straight to the database; returns
    its id and the trial ids from best to worst."""
    async def seed(conn: asyncpg.Connection) -> tuple[int, list[int]]:
        config = {"name": "many-trials", "entrypoint": "python3 train.py",
                  "searcher": {"name": "random", "metric": "loss", "max_trials": count,
                               "max_length": {"batches": 1}},
                  "resources": {"resource_pool": "default"},
                  "hyperparameters": {"x": {"type": "double", "minval": 0, "maxval": 1}}}
        experiment_id = await conn.fetchval(
            "INSERT INTO experiments (name, config, original_config, seed, state, owner,"
            " end_time) VALUES ('many-trials', $1, '', 1, 'COMPLETED', 'admin', now())"
            " RETURNING id", config)
        ids = await conn.fetchval(
            "WITH t AS (INSERT INTO trials (experiment_id, request_id, hparams, seed, state,"
            "  steps_completed, progress, end_time)"
            " SELECT $1, r, jsonb_build_object('x', r / $2::float), r, 'COMPLETED', 1, 1,"
            "  now() FROM generate_series(0, $2 - 1) r RETURNING id, request_id),"
            " m AS (INSERT INTO metrics (trial_id, metric_group, steps_completed, metrics)"
            " SELECT id, 'validation', 1, jsonb_build_object('loss', 1.0 / (1 + request_id))"
            " FROM t)"
            " SELECT array_agg(id ORDER BY request_id DESC) FROM t", experiment_id, count)
        await conn.execute("SELECT refresh_best_validation($1::int[])", ids)
        return experiment_id, list(ids)

    return on_database(db_url, seed)


def test_experiment_of_many_trials_pages_its_table(
    logged_in: BrowserContext, cluster: Cluster
) -> None:
    """250 trials: the page opens on the best 100 (paged and sorted by the master), pages on,
    and sorts by id on request; the charts draw the page's trials."""
    experiment_id, best_first = seed_many_trials(cluster.env["EPOCHAL_DB_URL"], 250)
    page = logged_in.new_page()
    page.goto(f"/experiments/{experiment_id}")
    page.click("#tab-trials")
    rows = page.locator("tr.trial-row")
    expect(rows).to_have_count(100)
    expect(page.locator("h2", has_text="Trials (250)")).to_be_visible()
    expect(page.locator("#trials-range")).to_have_text("trials 1–100 of 250")
    expect(rows.first).to_have_attribute("data-trial-id", str(best_first[0]))
    expect(page.locator("#trial-sort")).to_have_value("SORT_BY_BEST_VALIDATION_METRIC")
    expect(page.locator("#trials-prev")).to_be_disabled()
    expect(page.locator("#hp-scatter")).to_have_attribute("data-points", "100")
    screenshot(page, "experiment-many-trials")

    page.click("#trials-next")
    expect(page.locator("#trials-range")).to_have_text("trials 101–200 of 250")
    expect(rows.first).to_have_attribute("data-trial-id", str(best_first[100]))
    page.click("#trials-next")
    expect(page.locator("#trials-range")).to_have_text("trials 201–250 of 250")
    expect(rows).to_have_count(50)
    expect(page.locator("#trials-next")).to_be_disabled()

    # The stream the page follows after a turn first repeats what the turn drew: the table is
    # drawn once (a second draw would replace the sort buttons under a click in flight).
    page.evaluate("""() => {
      window.tableDraws = 0;
      new MutationObserver((changes) => {
        for (const change of changes) {
          for (const node of change.addedNodes) {
            if (node.querySelector && (node.matches("table") || node.querySelector("table"))) {
              window.tableDraws += 1;
            }
          }
        }
      }).observe(document.querySelector("#trials"), { childList: true, subtree: true });
      // The page closes a stream on its `end` event, after the events before it were drawn.
      const close = EventSource.prototype.close;
      EventSource.prototype.close = function () {
        if (this.url.includes("sortBy=SORT_BY_ID")) window.idStreamClosed = true;
        return close.call(this);
      };
    }""")
    # The experiment has ended: the stream of the new order sends one event and ends. (Waiting
    # for its request to finish missed the end the page cut short: that request fails.)
    page.select_option("#trial-sort", "SORT_BY_ID")
    page.wait_for_function("() => window.idStreamClosed === true", timeout=60_000)
    expect(page.locator("#trials-range")).to_have_text("trials 1–100 of 250")
    expect(rows.first).to_have_attribute("data-trial-id", str(min(best_first)))
    assert page.evaluate("() => window.tableDraws") == 1
    page.click("th button[data-sort='SORT_BY_ID']")  # again: the other way
    expect(rows.first).to_have_attribute("data-trial-id", str(max(best_first)))
    expect(page.locator("th button[data-sort='SORT_BY_ID']")).to_have_attribute(
        "aria-sort", "descending")
    # The searcher's metric comes first after the trial's id.
    headers = page.locator("#trials th").all_inner_texts()
    assert headers[1].startswith("Best loss") and headers[2] == "Latest loss", headers
    page.close()


@pytest.fixture
def session_to_end(chromium: Browser, cluster: Cluster) -> Iterator[Page]:
    """The cluster page in a browser context of its own, just logged in: a session a test may
    end without logging out the module's other tests."""
    ctx = chromium.new_context(base_url=cluster.url)
    try:
        page = ctx.new_page()
        page.goto("/cluster")
        log_in(page, cluster.secrets["admin_password"])
        expect(page).to_have_url(re.compile(r"/cluster$"))
        yield page
    finally:
        ctx.close()


def test_log_out_ends_the_session(session_to_end: Page, cluster: Cluster) -> None:
    page, ctx = session_to_end, session_to_end.context
    token = page.evaluate("() => localStorage.getItem('epochal.token')")
    assert token and any(c["name"] == "auth" for c in ctx.cookies())

    page.click("#logout")
    expect(page).to_have_url(re.compile(r"/login$"))
    assert page.evaluate("() => localStorage.getItem('epochal.token')") is None
    assert not any(c["name"] == "auth" for c in ctx.cookies())
    revoked = httpx.get(f"{cluster.url}/api/v1/me",
                        headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert revoked.status_code == 401
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login\?next=%2F$"))


def test_a_401_answered_while_logging_out_does_not_send_the_user_back(
        session_to_end: Page) -> None:
    """A page's poll sent before "Log out" comes back 401 once the token is revoked: it must not
    turn the way out into "/login?next=<this page>" (which logs the next user into it)."""
    page = session_to_end
    # A call in flight whose 401 lands just after the page has forgotten the token, while the
    # browser is still fetching /login: the moment a slow poll's answer arrives.
    page.evaluate("""() => {
        const realFetch = window.fetch;
        window.fetch = async (path, init) => {
            if (path !== "/api/v1/me") return realFetch(path, init);
            while (localStorage.getItem("epochal.token")) {
                await new Promise((resolve) => setTimeout(resolve, 0));
            }
            return new Response("{}", { status: 401 });
        };
        import("/static/api.js").then((m) => m.api("/api/v1/me")).catch(() => {});
    }""")
    page.click("#logout")
    expect(page).to_have_url(re.compile(r"/login$"))
    page.wait_for_load_state()
    expect(page).to_have_url(re.compile(r"/login$"))


def test_cluster_page_shows_admins_the_weeks_slot_hours_by_user_and_workspace(
    admin: BrowserContext, chromium: Browser, cluster: Cluster,
) -> None:
    """Two hours on 2 slots and one on 1, of a user and workspace of their own: the admin's
    cluster page adds them up per user and per workspace; an ordinary user has no such table."""
    mark = uuid.uuid4().hex[:6]
    user, workspace = f"usage-{mark}", f"ws-usage-{mark}"

    async def seed(conn: asyncpg.Connection) -> None:
        await conn.executemany(
            "INSERT INTO allocation_history (allocation_id, task_id, task_type, username,"
            " workspace_name, resource_pool, slots, start_time, end_time) VALUES"
            " ($1, $1, 'COMMAND', $2, $3, 'default', $4, now() - $5::interval,"
            " now() - interval '10 minutes')",
            [(f"{mark}-a.1", user, workspace, 2, timedelta(minutes=130)),
             (f"{mark}-b.1", user, workspace, 1, timedelta(minutes=70))])

    on_database(cluster.env["EPOCHAL_DB_URL"], seed)
    page, errors = opened(admin, "/cluster")
    row = page.locator(f"#usage-users tr.usage-row[data-key='{user}']")
    expect(row.locator("td.total")).to_have_text("5.00")  # 2 h x 2 slots + 1 h x 1
    expect(row.locator("td")).to_have_count(9)  # the user, 7 days and the total
    ws_row = page.locator(f"#usage-workspaces tr.usage-row[data-key='{workspace}']")
    expect(ws_row.locator("td.total")).to_have_text("5.00")
    expect(page.locator("#usage h2")).to_contain_text("last 7 days")
    screenshot(page, "cluster-usage")
    assert errors == []
    page.close()

    name = new_user(cluster, "viewer")
    ordinary = signed_in(chromium, cluster, username=name, password=USER_PASSWORD)
    try:
        page, errors = opened(ordinary, "/cluster")
        expect(page.locator("tr.agent-row")).to_have_count(1)
        expect(page.locator("#usage")).to_have_count(0)
        assert errors == []
    finally:
        ordinary.close()


# -- The job queue's moves. These come last: while one runs the agent's slots are disabled. ---

TERMINAL = {"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED"}


def submit_waiting(cluster: Cluster, name: str) -> int:
    """An experiment of the admin's, one trial on one slot (its code never runs here)."""
    config = yaml.safe_dump({
        "name": name, "entrypoint": "python3 train.py", "max_restarts": 0,
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}},
        "resources": {"slots_per_trial": 1}})
    code = base64.b64encode(b"raise SystemExit('never run: the slots are disabled')\n").decode()
    answer = httpx.post(f"{cluster.url}/api/v1/experiments", headers=cluster.headers, timeout=30,
                        json={"config": config,
                              "modelDefinition": [{"path": "train.py", "content": code}]})
    assert answer.status_code == 200, answer.text
    return int(answer.json()["experiment"]["id"])


def queue_jobs(cluster: Cluster, job_ids: list[str]) -> list[tuple[str, str]]:
    """The jobs among `job_ids` that wait, in the order the API lists them, with their pools."""
    return [(j["jobId"], j["resourcePool"]) for j in api_get(cluster, "/api/v1/job-queues")["jobs"]
            if j["jobId"] in job_ids and j["summary"]["state"] == "STATE_QUEUED"]


def queue_order(cluster: Cluster, job_ids: list[str]) -> list[str]:
    return [job for job, _ in queue_jobs(cluster, job_ids)]


def page_shows_order(page: Page, job_ids: list[str]) -> None:
    """Wait until the cluster page lists these jobs in this order (others may be between)."""
    page.wait_for_function(
        """(ids) => JSON.stringify([...document.querySelectorAll('#queue tr.job-row')]
            .map((row) => row.dataset.jobId).filter((id) => ids.includes(id)))
            === JSON.stringify(ids)""", arg=job_ids)


@pytest.fixture
def waiting_jobs(cluster: Cluster) -> Iterator[list[str]]:
    """Two jobs of the admin's waiting in pool default, in the order submitted: the agent's slots
    are disabled (nothing new starts on them) until both have ended."""
    [agent] = api_get(cluster, "/api/v1/agents")["agents"]
    slots = [str(s["id"]) for s in agent["slots"].values()]
    base = f"{cluster.url}/api/v1/agents/{agent['id']}/slots"
    for slot in slots:
        answer = httpx.post(f"{base}/{slot}/disable", headers=cluster.headers, timeout=30,
                            json={"reason": "the queue tests' jobs wait"})
        assert answer.status_code == 200, answer.text
    made: list[int] = []
    try:
        for name in ("queued-first", "queued-second"):
            made.append(submit_waiting(cluster, name))
        jobs = [f"experiment-{e}" for e in made]
        wait_for(lambda: queue_order(cluster, jobs) == jobs, 30, "both jobs to wait, in order")
        yield jobs
    finally:
        try:
            for experiment_id in made:
                httpx.post(f"{cluster.url}/api/v1/experiments/{experiment_id}/kill",
                           headers=cluster.headers, timeout=30)
            wait_for(lambda: all(api_get(cluster, f"/api/v1/experiments/{e}")["experiment"][
                "state"] in TERMINAL for e in made), 30, "the queued jobs to end")
        finally:  # the module's later tests need the slots, whatever happened here
            for slot in slots:
                httpx.post(f"{base}/{slot}/enable", headers=cluster.headers, timeout=30)


def test_cluster_page_moves_a_queued_job_up_and_down(
    admin: BrowserContext, cluster: Cluster, waiting_jobs: list[str]
) -> None:
    """The second job goes up, ahead of the first (aheadOf), then down again, behind it
    (behindOf): the API's queue and the page's follow each move."""
    first, second = waiting_jobs
    page, errors = opened(admin, "/cluster")
    page_shows_order(page, [first, second])
    row = {job: page.locator(f"#queue tr.job-row[data-job-id='{job}']") for job in waiting_jobs}
    expect(row[first].locator("button.move-up")).to_be_disabled()  # the first of the pool
    expect(row[second].locator("button.move-down")).to_be_disabled()  # the last
    up = row[second].get_by_role("button", name=f"move {second} up, ahead of {first}")

    up.click()
    expect(page.locator("#queue-status")).to_have_text(
        f"{second} up, ahead of {first}: moved")
    wait_for(lambda: queue_order(cluster, waiting_jobs) == [second, first], 10,
             "the API to list the second job first")
    page_shows_order(page, [second, first])
    screenshot(page, "cluster-queue-moved")

    row[second].get_by_role("button", name=f"move {second} down, behind {first}").click()
    expect(page.locator("#queue-status")).to_have_text(f"{second} down, behind {first}: moved")
    wait_for(lambda: queue_order(cluster, waiting_jobs) == [first, second], 10,
             "the API to list the first job first again")
    page_shows_order(page, [first, second])
    assert errors == []
    page.close()


def test_cluster_page_says_why_a_move_is_refused(
    chromium: Browser, cluster: Cluster, waiting_jobs: list[str]
) -> None:
    """Another user may not move the admin's job (403); a move past a job that has ended since
    the page last read the queue is refused (400, naming aheadOf). The page says the master's
    reason, then reads the queue again."""
    first, second = waiting_jobs
    name = new_user(cluster, "mover")
    ordinary = signed_in(chromium, cluster, username=name, password=USER_PASSWORD)
    try:
        page, errors = opened(ordinary, "/cluster")
        page_shows_order(page, [first, second])
        page.locator(f"#queue tr.job-row[data-job-id='{first}'] button.move-down").click()
        expect(page.locator("#queue-status .error")).to_contain_text(
            f"{first} down, behind {second}: refused: user {name} may not change experiment "
            f"{first.removeprefix('experiment-')}, which belongs to {ADMIN}")
        assert queue_order(cluster, waiting_jobs) == [first, second]
        assert errors == []
    finally:
        ordinary.close()

    # The page's clock stands still, so its two-second poll never runs: it shows the queue as
    # read once at load, as a page does in the moment before its next read.
    own = signed_in(chromium, cluster)
    try:
        own.clock.install()
        own.clock.pause_at(datetime.now() + timedelta(seconds=1))
        page, errors = opened(own, "/cluster")
        page_shows_order(page, [first, second])
        killed = httpx.post(
            f"{cluster.url}/api/v1/experiments/{first.removeprefix('experiment-')}/kill",
            headers=cluster.headers, timeout=30)
        assert killed.status_code == 200, killed.text
        wait_for(lambda: first not in queue_order(cluster, waiting_jobs) and api_get(
            cluster, f"/api/v1/experiments/{first.removeprefix('experiment-')}")[
                "experiment"]["state"] in TERMINAL, 30, "the first job to end")
        page.get_by_role("button", name=f"move {second} up, ahead of {first}").click()
        expect(page.locator("#queue-status .error")).to_contain_text(
            f"{second} up, ahead of {first}: refused: aheadOf: job {first} has ended")
        expect(page.locator(f"#queue tr.job-row[data-job-id='{first}']")).to_have_count(0)
        screenshot(page, "cluster-queue-refused")
        assert errors == []
    finally:
        own.close()


def test_cluster_page_moves_a_queued_job_to_another_pool(
    admin: BrowserContext, cluster: Cluster, waiting_jobs: list[str]
) -> None:
    """Its pool selector moves a waiting job to another pool: the page says so, the API then
    lists it in that pool (`det job update --resource-pool`'s effect), and so does the page."""
    first, _ = waiting_jobs
    page, errors = opened(admin, "/cluster")
    row = page.locator(f"#queue tr.job-row[data-job-id='{first}']")
    move = row.get_by_role("button", name=f"move {first} to the chosen pool")
    expect(move).to_be_disabled()  # its own pool is chosen
    row.get_by_role("combobox", name=f"resource pool to move {first} to").select_option(
        SPARE_POOL)
    move.click()
    expect(page.locator("#queue-status")).to_contain_text(f"{first} to pool {SPARE_POOL}: moved")
    wait_for(lambda: (first, SPARE_POOL) in queue_jobs(cluster, waiting_jobs), 10,
             f"the API to list {first} in pool {SPARE_POOL}")
    expect(row).to_have_attribute("data-pool", SPARE_POOL)
    expect(row.locator("select.move-pool")).to_have_value(SPARE_POOL)
    assert errors == []
    page.close()
