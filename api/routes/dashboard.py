"""The web dashboard: HTML shells for each page and the static files (JS, CSS, its icon) they load.

Pages need no token: each shell loads a script from api/static/ that logs in (or goes to
/login) and reads everything from the token-protected REST API, so the dashboard sees exactly
what the CLI sees. Everything is served from here; nothing comes from the network.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.util
import json
import uuid
from functools import cache
from html import escape
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from api.auth import AUTH_COOKIE
from api.deps import AppSettings
from api.errors import not_found, require_choice
from api.settings import Settings
from common.states import (
    TERMINAL_STATES,
    CheckpointState,
    ExperimentState,
    JobState,
    TaskState,
    TrialState,
)

# Every state the pages' scripts compare with, by kind, and the terminal ones.
PAGE_STATES = json.dumps({
    "experiment": list(ExperimentState), "trial": list(TrialState), "task": list(TaskState),
    "checkpoint": list(CheckpointState), "job": list(JobState),
    "terminal": sorted(TERMINAL_STATES),
})

router = APIRouter(tags=["dashboard"], include_in_schema=False)

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
# Served by name from this fixed set, so no request path can reach outside the folder.
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
STATIC_FILES = {p.name: p for p in STATIC_DIR.iterdir() if p.suffix in MEDIA_TYPES}
# Pages are tiny and the scripts change with the master: always revalidate (ETag makes it cheap).
NO_CACHE = {"Cache-Control": "no-cache"}

# plotly.js, from the installed plotly package (a dependency): its version is in the address, so
# browsers keep it for good and a new version is a new address.
_PLOTLY_SPEC = importlib.util.find_spec("plotly")
PLOTLY_JS = Path(_PLOTLY_SPEC.origin if _PLOTLY_SPEC and _PLOTLY_SPEC.origin else "").parent \
    / "package_data" / "plotly.min.js"
PLOTLY_ADDRESS = f"/static/vendor/plotly-{importlib.metadata.version('plotly')}.min.js"
KEEP = {"Cache-Control": "public, max-age=31536000, immutable"}

# The pages `det notebook start` and `det tensorboard start` print (Determined's web UI,
# /det/interactive/<id>/<service>/...), by service: the task's own page, this path under
# /proxy/<id>/.
INTERACTIVE_PAGES = {"jupyter-lab": "lab", "tensorboard": ""}

_HEADER = """<header class="top"><a class="brand" href="/">Epochal</a>
<nav><a href="/">Experiments</a><a href="/workspaces">Workspaces</a><a href="/tasks">Tasks</a>
<a href="/models">Models</a><a href="/cluster">Cluster</a></nav>
<span id="whoami"></span><a href="/login" id="logout">Log out</a></header>"""

_LOGIN_FORM = """<form id="login-form" class="login" autocomplete="on">
<h1>Log in to Epochal</h1>
<label>Username <input name="username" id="username" autocomplete="username" required></label>
<label>Password <input name="password" id="password" type="password"
 autocomplete="current-password" required></label>
<button type="submit" id="login-button">Log in</button>
<p id="login-error" class="error" role="alert"></p></form>"""


def _page(title: str, script: str, body: str, *, page_id: int | None = None,
          charts: bool = False, workflows: str | None = None) -> HTMLResponse:
    data_id = f' data-id="{page_id}"' if page_id is not None else ""
    # Where Temporal's UI lists the namespace's workflows: pages link each to its own.
    data_workflows = f" data-temporal-workflows='{escape(workflows)}'" if workflows else ""
    # Deferred, so it runs before the page's module script (both run in document order).
    vendor = f"<script defer src='{PLOTLY_ADDRESS}'></script>" if charts else ""
    return HTMLResponse(
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(title)} · Epochal</title>"
        "<link rel='stylesheet' href='/static/style.css'>"
        "<link rel='icon' type='image/svg+xml' href='/static/favicon.svg'>"
        f"{vendor}<script type='module' src='/static/{script}'></script></head>"
        f"<body data-page='{script.removesuffix('.js')}'{data_id}{data_workflows}"
        # The pages' scripts learn the states here, from their one home (dom.js reads them).
        f" data-states='{escape(PAGE_STATES)}'>{body}</body></html>",
        headers=NO_CACHE,
    )


def _app_page(title: str, script: str, page_id: int | None = None,
              charts: bool = False, settings: Settings | None = None) -> HTMLResponse:
    return _page(
        title,
        script,
        f"{_HEADER}<main id='main'><p class='muted'>Loading…</p></main>",
        page_id=page_id,
        charts=charts,
        workflows=temporal_workflows_url(settings) if settings else None,
    )


def temporal_workflows_url(settings: Settings) -> str | None:
    """Temporal UI's page of the cluster's namespace's workflows, when the master knows the UI
    (EPOCHAL_TEMPORAL_UI_URL)."""
    if not settings.temporal_ui_url:
        return None
    return f"{settings.temporal_ui_url}/namespaces/{quote(settings.temporal_namespace)}/workflows"


@router.get("/login", response_class=HTMLResponse)
async def login_page() -> HTMLResponse:
    return _page("Log in", "login.js", _LOGIN_FORM)


@router.get("/", response_class=HTMLResponse)
async def experiments_page() -> HTMLResponse:
    return _app_page("Experiments", "experiments.js")


@router.get("/experiments/{experiment_id}", response_class=HTMLResponse)
async def experiment_page(experiment_id: int, settings: AppSettings) -> HTMLResponse:
    return _app_page(f"Experiment {experiment_id}", "experiment.js", experiment_id,
                     charts=True, settings=settings)


@router.get("/workspaces", response_class=HTMLResponse)
async def workspaces_page() -> HTMLResponse:
    return _app_page("Workspaces", "workspaces.js")


@router.get("/workspaces/{workspace_id}", response_class=HTMLResponse)
async def workspace_page(workspace_id: int) -> HTMLResponse:
    return _app_page(f"Workspace {workspace_id}", "workspace.js", workspace_id)


@router.get("/projects/{project_id}", response_class=HTMLResponse)
async def project_page(project_id: int) -> HTMLResponse:
    return _app_page(f"Project {project_id}", "project.js", project_id)


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(settings: AppSettings) -> HTMLResponse:
    return _app_page("Compare experiments", "compare.js", charts=True, settings=settings)


@router.get("/trials/{trial_id}", response_class=HTMLResponse)
async def trial_page(trial_id: int, settings: AppSettings) -> HTMLResponse:
    return _app_page(f"Trial {trial_id}", "trial.js", trial_id, charts=True, settings=settings)


@router.get("/models", response_class=HTMLResponse)
async def models_page() -> HTMLResponse:
    return _app_page("Models", "models.js")


@router.get("/models/{model_id}", response_class=HTMLResponse)
async def model_page(model_id: int) -> HTMLResponse:
    return _app_page(f"Model {model_id}", "model.js", model_id)


@router.get("/models/{model_id}/versions/{version}", response_class=HTMLResponse)
async def model_version_page(model_id: int, version: int) -> HTMLResponse:
    return _app_page(f"Model {model_id} version {version}", "model_version.js", model_id)


@router.get("/cluster", response_class=HTMLResponse)
async def cluster_page() -> HTMLResponse:
    return _app_page("Cluster", "cluster.js")


@router.get("/tasks", response_class=HTMLResponse)
async def tasks_page(settings: AppSettings) -> HTMLResponse:
    return _app_page("Tasks", "tasks.js", settings=settings)


@router.get("/det/interactive/{task_id}/{service}/{rest:path}")
@router.get("/interactive/{task_id}/{service}/{rest:path}")
async def interactive_task_page(task_id: uuid.UUID, service: str,
                                request: Request) -> RedirectResponse:
    """Determined's address of a notebook or TensorBoard (`/det/interactive/<id>/jupyter-lab/
    <description>/<pool>/<wait page>`) opens the task through the proxy, which takes the
    dashboard's cookie: without one, the login page first."""
    require_choice("service", service, INTERACTIVE_PAGES)
    target = f"/proxy/{task_id}/{INTERACTIVE_PAGES[service]}"
    if not request.cookies.get(AUTH_COOKIE):
        target = f"/login?next={quote(target, safe='')}"
    return RedirectResponse(target, status_code=302)


@router.get("/static/{name}")
async def static_file(name: str) -> FileResponse:
    path = STATIC_FILES.get(name)
    if path is None:
        raise not_found("static file", name)
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=NO_CACHE)


@cache
def _plotly_gzipped() -> bytes:
    return gzip.compress(PLOTLY_JS.read_bytes(), compresslevel=6)


@router.get(PLOTLY_ADDRESS)
async def plotly_js(request: Request) -> Response:
    """plotly.js, gzipped (1.4 MB instead of 4.8) for a browser that takes it."""
    if "gzip" not in request.headers.get("accept-encoding", ""):
        return FileResponse(PLOTLY_JS, media_type=MEDIA_TYPES[".js"], headers=KEEP)
    return Response(await run_in_threadpool(_plotly_gzipped), media_type=MEDIA_TYPES[".js"],
                    headers={**KEEP, "Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
