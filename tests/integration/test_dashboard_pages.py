"""The dashboard's pages and static files: served without a token, nothing outside api/static."""

from __future__ import annotations

import httpx
import pytest

from tests.master_fixtures import LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")

PAGES = {"/login": "login.js", "/": "experiments.js", "/experiments/7": "experiment.js",
         "/trials/9": "trial.js", "/cluster": "cluster.js", "/models": "models.js",
         "/tasks": "tasks.js", "/workspaces": "workspaces.js", "/workspaces/4": "workspace.js",
         "/projects/5": "project.js", "/compare": "compare.js",
         "/models/3": "model.js", "/models/3/versions/2": "model_version.js"}


async def test_pages_load_without_a_token_and_name_their_script(live_master: LiveMaster) -> None:
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as anonymous:
        for path, script in PAGES.items():
            answer = await anonymous.get(path)
            assert answer.status_code == 200, path
            assert answer.headers["content-type"].startswith("text/html")
            assert f"/static/{script}" in answer.text
            js = await anonymous.get(f"/static/{script}")
            assert js.status_code == 200
            assert js.headers["content-type"].startswith("text/javascript")
        css = await anonymous.get("/static/style.css")
        assert css.headers["content-type"].startswith("text/css")
        assert 'data-id="7"' in (await anonymous.get("/experiments/7")).text


async def test_static_files_are_only_those_of_the_folder(live_master: LiveMaster) -> None:
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as anonymous:
        for name in ("nope.js", "..%2Fapp.py", "%2E%2E%2Froutes%2Fdashboard.py", "__init__.py"):
            answer = await anonymous.get(f"/static/{name}")
            assert answer.status_code == 404, name
            assert "not found" in answer.json()["message"].lower()


async def test_a_page_id_must_be_a_number(live_master: LiveMaster) -> None:
    async with httpx.AsyncClient(base_url=live_master.url, timeout=30) as anonymous:
        answer = await anonymous.get("/experiments/abc")
        assert answer.status_code == 400
        assert any("experiment_id" in d for d in answer.json()["details"])
