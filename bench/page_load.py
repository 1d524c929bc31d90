"""How long the dashboard's everyday pages take to show their table and first chart.

Starts a local cluster in a temporary state dir on free ports, writes a finished search of
--trials trials into its database (as the browser tests do), logs in with headless Chromium and
loads each page once (--warm-ups) to warm the browser's cache (plotly.js), then --loads times:
  - experiments list: until its table has the search's row;
  - experiment page:  until the trials table and the first learning-curve chart are drawn;
  - trial page:       until its first learning-curve chart is drawn.
Times are the page's own clock (ms since the navigation began), read when the thing is there
(the charts record when they were first drawn; tables are polled each animation frame).
Prints the median per page; the last line is the one-line summary.

    .venv/bin/python bench/page_load.py [--loads 5] [--warm-ups 1] [--trials 40] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, expect, sync_playwright

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from deploy.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from tests.browser.conftest import log_in  # noqa: E402
from tests.browser.test_search_views import seed_search  # noqa: E402

# When `selector` is there (ms since navigation), or when its chart was first drawn.
SHOWN = "(s) => document.querySelector(s) && performance.now()"
DRAWN = "(s) => Number(document.querySelector(s)?.dataset.firstDrawn) || 0"


def timed(page: Page, url: str, waits: dict[str, tuple[str, str]]) -> dict[str, float]:
    """Seconds from navigation to each of `waits` (name: (how, selector))."""
    page.goto(url)
    took = {}
    for name, (how, selector) in waits.items():
        try:
            took[name] = float(page.wait_for_function(how, arg=selector, timeout=60_000)
                               .json_value()) / 1000
        except PlaywrightError as err:
            raise SystemExit(f"{url}: no {name} ({selector}) after 60 s: {err}") from None
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--warm-ups", type=int, default=1,
                        help="untimed loads of each page before its timed ones")
    add_smoke_option(parser, loads=1, warm_ups=0, trials=1)
    args = parse_args(parser)
    with bench_cluster(agent_slots=1) as (_, info):
        experiment_id, trial_ids = seed_search(info.db_url, args.trials)
        pages = {
            "experiments list": ("/", {
                "table": (SHOWN, f"tr.experiment-row[data-id='{experiment_id}']")}),
            "experiment page": (f"/experiments/{experiment_id}", {
                "trials table": (DRAWN, "#trials"),
                "first chart": (DRAWN, "#curves .line-chart")}),
            "trial page": (f"/trials/{trial_ids[0]}", {
                "first chart": (DRAWN, "#curves .line-chart")}),
        }
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=list(CHROMIUM_ARGS))
            ctx = browser.new_context(base_url=info.dashboard_url,
                                      viewport={"width": 1280, "height": 900})
            page = ctx.new_page()
            page.goto("/")
            log_in(page, info.admin_password)
            expect(page.locator("#whoami")).to_have_text("admin", timeout=30_000)
            figures: dict[str, list[float]] = {}
            for name, (url, waits) in pages.items():
                for _ in range(args.warm_ups):  # warm: plotly.js and the page's modules cached
                    timed(page, url, waits)
                for _ in range(args.loads):
                    for what, took in timed(page, url, waits).items():
                        figures.setdefault(f"{name}: {what}", []).append(took)
            browser.close()
    medians = {name: statistics.median(values) for name, values in figures.items()}
    for name, value in medians.items():
        print(f"{name:<32} median {value:6.3f} s  (runs: "
              f"{', '.join(f'{v:.3f}' for v in figures[name])})")
    print(f"median of {args.loads} loads, {args.trials} trials: " + ", ".join(
        f"{name} {value:.3f} s" for name, value in medians.items()))


if __name__ == "__main__":
    main()
