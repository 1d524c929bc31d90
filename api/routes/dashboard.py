"""A plain, server-rendered overview page at `/`: experiments and their trials.

It needs no JavaScript and no network, and refreshes itself while anything runs. The full
dashboard (learning curves, controls) is built on the same REST API.
"""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from api import views
from api.deps import Pool

router = APIRouter(tags=["dashboard"], include_in_schema=False)

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}
td,th{border-bottom:1px solid #ddd;padding:.25rem .75rem;text-align:left;font-size:.9rem}
th{background:#f4f4f4}.best{background:#eaf7ea}
"""


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return escape(str(value)) if value is not None else ""


def _trial_rows(trials: list[dict[str, Any]], best_id: int | None) -> str:
    rows = []
    for t in trials:
        hparams = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(t["hparams"].items()))
        css = ' class="best"' if t["id"] == best_id else ""
        rows.append(
            f"<tr{css}><td>{t['id']}</td><td>{t['state'].removeprefix('STATE_')}</td>"
            f"<td>{escape(hparams)}</td><td>{t['totalBatchesProcessed']}</td>"
            f"<td>{_fmt(t['searcherMetricValue'])}</td><td>{t['restarts']}</td></tr>"
        )
    return "".join(rows)


@router.get("/", response_class=HTMLResponse)
async def overview(pool: Pool) -> HTMLResponse:
    rows, _ = await views.fetch_experiment_rows(
        pool, states=None, include_archived=False, order_desc=True, limit=20, offset=0
    )
    sections = []
    running = False
    for row in rows:
        trials = await views.fetch_trials(pool, row["id"])
        exp = views.experiment_json(row, trials)
        running = running or row["state"] not in views.TERMINAL_STATES
        sections.append(
            f"<h2>Experiment {exp['id']}: {escape(exp['name'])}</h2>"
            f"<p>{exp['state'].removeprefix('STATE_')} &middot; {exp['searcherType']} search on "
            f"{escape(exp['searcherMetric'])} &middot; best trial {_fmt(exp['bestTrialId'])} "
            f"({_fmt(exp['bestValidation'])})</p>"
            "<table><tr><th>trial</th><th>state</th><th>hyperparameters</th><th>batches</th>"
            f"<th>{escape(exp['searcherMetric'])}</th><th>restarts</th></tr>"
            f"{_trial_rows(trials, exp['bestTrialId'])}</table>"
        )
    refresh = '<meta http-equiv="refresh" content="3">' if running else ""
    body = "".join(sections) or "<p>No experiments yet: <code>epochal experiment create</code>.</p>"
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset='utf-8'><title>Epochal</title>{refresh}"
        f"<style>{_STYLE}</style></head><body><h1>Epochal</h1>{body}</body></html>"
    )
