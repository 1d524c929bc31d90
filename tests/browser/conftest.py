"""Real headless Chromium (Debian's, via Playwright) against a real local cluster.

One cluster (master + one agent with two slots in pool `default`, and a second pool without
agents) and one running experiment serve the whole module; each test opens pages in one
logged-in browser context. Chromium is Debian's /usr/bin/chromium, never a browser Playwright
downloads; without it the tests skip, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest
import yaml

from deploy.browser import CHROMIUM, CHROMIUM_ARGS
from deploy.debian_packages import in_ci
from tests.e2e.cluster import REPO, SLOW_MODEL, Cluster, created_id, shared_servers_cluster
from tests.waiting import wait_for

try:
    from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright
except ImportError:  # the `test` extra is not installed
    sync_playwright = None  # type: ignore[assignment]

T = TypeVar("T")

SCREENSHOTS = REPO / "test-artifacts" / "screenshots"
ADMIN = "admin"
# A pool without agents, for the cluster page's move of a job to another pool.
SPARE_POOL = "spare"
# Long enough (about 30 s a trial) to pause and activate it while it runs.
STEPS = 150
LEARNING_RATES = [0.03, 0.2]
TIMEOUT_MS = 30_000
if sync_playwright is not None:
    # Assertions wait for the page as long as actions do (Playwright's default is 5 s): the
    # suite's workers share two cores, and a busy machine shows a state later, never wrongly.
    expect.set_options(timeout=TIMEOUT_MS)


def require_chromium(chromium: Path = CHROMIUM) -> None:
    """Skip when Playwright or Chromium is missing, except in CI, where that is a failure."""
    missing = None
    if sync_playwright is None:
        missing = "playwright is not installed (pip install -e '.[test]')"
    elif not chromium.exists():
        missing = f"{chromium} is missing (python -m deploy.browser installs it)"
    if missing:
        if in_ci():
            pytest.fail(f"browser tests cannot run in CI: {missing}")
        pytest.skip(missing)


@pytest.fixture(scope="module")
def chromium_ready() -> None:
    """Checked before anything starts, so a missing browser costs no cluster."""
    require_chromium()


@pytest.fixture(scope="module")
def cluster(chromium_ready: None, postgres_url: str, temporal_address: str,
            temporal_ui_url: str | None) -> Iterator[Cluster]:
    """The dashboard links workflows to the session's Temporal UI (given as an external
    Temporal's would be)."""
    env = {"EPOCHAL_RESOURCE_POOLS": f"default,{SPARE_POOL}"}
    if temporal_ui_url:
        env["EPOCHAL_TEMPORAL_UI_URL"] = temporal_ui_url
    with shared_servers_cluster(postgres_url, temporal_address, "browser", "--slots", "2",
                                env_extra=env) as c:
        yield c


@pytest.fixture(scope="module")
def chromium(cluster: Cluster) -> Iterator[Browser]:
    """Chromium for this module only. Started after the cluster and stopped with the module:
    Playwright's sync API keeps an event loop running in this thread while it is open, which
    code using asyncio.run (the cluster's setup) and later async tests cannot share."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS))
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def experiment_id(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> int:
    """A grid of two trials (one per learning rate), both running once this returns."""
    config = {
        "name": "browser-grid",
        "entrypoint": "python3 train.py",
        "hyperparameters": {
            "lr": {"type": "categorical", "vals": LEARNING_RATES},
            "sleep": 0.2,
            "checkpoint_every": 5,
        },
        "searcher": {"name": "grid", "metric": "validation_loss",
                     "max_length": {"batches": STEPS}, "max_concurrent_trials": 2},
        "max_restarts": 0,
    }
    path = Path(tmp_path_factory.mktemp("browser")) / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    exp = created_id(cluster.run("experiment", "create", str(path), str(SLOW_MODEL)).stdout)

    def running() -> bool:
        trials = api_get(cluster, f"/api/v1/experiments/{exp}/trials")["trials"]
        return len(trials) == len(LEARNING_RATES) and all(
            t["state"] == "STATE_RUNNING" and t["totalBatchesProcessed"] > 0 for t in trials
        )

    try:
        wait_for(running, timeout=90, what="both trials to run and report")
    except AssertionError as err:
        trials = api_get(cluster, f"/api/v1/experiments/{exp}/trials")["trials"]
        logs = [httpx.get(f"{cluster.url}/api/v1/trials/{t['id']}/logs", headers=cluster.headers,
                          timeout=30).text[-2000:] for t in trials]
        raise AssertionError(f"{err}: trials {trials}, their logs {logs}") from None
    return exp


@pytest.fixture(scope="module")
def context(chromium: Browser, cluster: Cluster) -> Iterator[BrowserContext]:
    ctx = chromium.new_context(base_url=cluster.url, viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(TIMEOUT_MS)
    yield ctx
    ctx.close()


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    yield page
    page.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def api_get(cluster: Cluster, path: str) -> Any:
    answer = httpx.get(cluster.url + path, headers=cluster.headers, timeout=30)
    answer.raise_for_status()
    return answer.json()


def screenshot(page: Page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def log_in(page: Page, password: str) -> None:
    page.fill("#username", ADMIN)
    page.fill("#password", password)
    page.click("#login-button")


USER_PASSWORD = "a-long-password"  # every ordinary user's that `new_user` makes


def new_user(cluster: Cluster, prefix: str) -> str:
    """An ordinary user, `<prefix>-<6 hex digits>` with USER_PASSWORD, made by the admin."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    made = httpx.post(f"{cluster.url}/api/v1/users", headers=cluster.headers, timeout=30,
                      json={"user": {"username": name}, "password": USER_PASSWORD})
    assert made.status_code == 200, made.text
    return name


def signed_in(chromium: Browser, cluster: Cluster, *, username: str = ADMIN,
              password: str | None = None, width: int = 1280) -> BrowserContext:
    """A fresh browser (no storage of another's) logged in as `username` (the admin unless
    told)."""
    ctx = chromium.new_context(base_url=cluster.url, viewport={"width": width, "height": 900})
    ctx.set_default_timeout(TIMEOUT_MS)
    page = ctx.new_page()
    page.goto("/login")
    page.fill("#username", username)
    page.fill("#password", password or cluster.secrets["admin_password"])
    page.click("#login-button")
    expect(page.locator("#whoami")).to_have_text(username)
    page.close()
    return ctx


@pytest.fixture(scope="module")
def admin(chromium: Browser, cluster: Cluster) -> Iterator[BrowserContext]:
    """The admin's browser, 1,400 px wide, signed in once for the module."""
    ctx = signed_in(chromium, cluster, width=1400)
    yield ctx
    ctx.close()


def opened(ctx: BrowserContext, path: str) -> tuple[Page, list[str]]:
    """A new page at `path`, and the JavaScript errors it will raise."""
    page = ctx.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(path)
    return page, errors


def in_thread(work: Callable[[], Awaitable[T]]) -> T:
    """Run the coroutine `work()` in a thread of its own: Playwright's sync API holds this
    thread's event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, work()).result()  # type: ignore[arg-type]


def on_database(db_url: str, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
    """Run `work` on a connection to the cluster's database (jsonb as Python values)."""
    async def run() -> T:
        conn = await asyncpg.connect(db_url)
        try:
            await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads,
                                      schema="pg_catalog")
            return await work(conn)
        finally:
            await conn.close()

    return in_thread(run)
