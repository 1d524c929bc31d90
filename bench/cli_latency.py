"""How long the everyday `epochal` commands take, from starting the process to its exit.

Starts a local cluster in a temporary state dir on free ports (or uses a running master given with
--master and the CLI's login), writes a finished 40-trial search into its database (as the browser
tests do), then runs each command in a fresh subprocess --runs times: `--help`, `experiment list`,
`experiment describe ID`, `trial describe ID`, `user whoami` and `experiment create` (a tiny
config; the command's own return, not the experiment's run). With --load N the same again beside
N processes that keep a CPU busy each. Prints median and p90 per command; the last line is the
one-line summary.

The commands are run as `python -m deploy.console` (the installed `epochal`) from --tree, so the
same bench times an older checkout: `git worktree add /tmp/before <commit>` and --tree /tmp/before.

    .venv/bin/python bench/cli_latency.py [--runs 10] [--load 0] [--tree DIR] [--master URL]
        [--smoke]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.login import admin_headers, cli_headers  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from tests.browser.test_search_views import seed_search  # noqa: E402

DIGITS = REPO / "examples" / "digits"


def tiny_config(directory: Path) -> Path:
    """The digits example cut to one batch: `experiment create` is timed, not the run."""
    config = yaml.safe_load((DIGITS / "single.yaml").read_text())
    config["name"] = "cli-latency"
    config["searcher"]["max_length"] = {"batches": 1}
    path = directory / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def commands(experiment_id: int, trial_id: int, config: Path) -> list[tuple[str, list[str]]]:
    return [
        ("--help", ["--help"]),
        ("experiment list", ["experiment", "list"]),
        ("experiment describe", ["experiment", "describe", str(experiment_id)]),
        ("trial describe", ["trial", "describe", str(trial_id)]),
        ("user whoami", ["user", "whoami"]),
        ("experiment create", ["experiment", "create", str(config), str(DIGITS)]),
    ]


def time_command(tree: Path, env: dict[str, str], words: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "deploy.console", *words], cwd=tree, env=env,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"`epochal {' '.join(words)}` failed ({done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return took


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def _spin() -> None:
    while True:
        pass


@contextmanager
def busy(processes: int) -> Iterator[None]:
    """`processes` processes that each keep one CPU busy until the block ends."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(processes)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join()


def measure(tree: Path, env: dict[str, str], cmds: list[tuple[str, list[str]]], runs: int,
            label: str) -> dict[str, tuple[float, float]]:
    results = {}
    for name, words in cmds:
        time_command(tree, env, words)  # warm-up: the files in the page cache
        took = [time_command(tree, env, words) for _ in range(runs)]
        results[name] = (statistics.median(took), p90(took))
        print(f"{label:<6} {name:<22} median {results[name][0]:6.3f} s   "
              f"p90 {results[name][1]:6.3f} s", flush=True)
    return results


def run(master: str, token: str, experiment_id: int, trial_id: int, args: argparse.Namespace
        ) -> None:
    tree = Path(args.tree).resolve()
    env = {**os.environ, "EPOCHAL_MASTER": master, "EPOCHAL_TOKEN": token,
           "PYTHONPATH": str(tree), "COLUMNS": "120"}
    with tempfile.TemporaryDirectory(prefix="epochal-cli-bench-") as scratch:
        cmds = commands(experiment_id, trial_id, tiny_config(Path(scratch)))
        print(f"tree {tree}, {args.runs} runs per command, {os.cpu_count()} CPUs")
        quiet = measure(tree, env, cmds, args.runs, "idle")
        loaded = {}
        if args.load:
            with busy(args.load):
                loaded = measure(tree, env, cmds, args.runs, f"load{args.load}")
    summary = ", ".join(f"{name} {quiet[name][0]:.3f} s" for name in
                        ("--help", "experiment list", "experiment create"))
    if loaded:
        summary += (f"; with {args.load} busy CPUs: --help {loaded['--help'][0]:.3f} s, "
                    f"experiment list {loaded['experiment list'][0]:.3f} s")
    print(f"median over {args.runs}: {summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--load", type=int, default=0,
                        help="also time each command beside this many busy CPU processes")
    parser.add_argument("--tree", default=str(REPO),
                        help="the checkout whose CLI is timed (default: this one)")
    parser.add_argument("--master", help="use this running master instead of a new cluster")
    parser.add_argument("--experiment", type=int, help="with --master: the experiment to describe")
    parser.add_argument("--trial", type=int, help="with --master: the trial to describe")
    add_smoke_option(parser, runs=1, load=1)
    args = parse_args(parser)
    if args.master:
        if args.experiment is None or args.trial is None:
            raise SystemExit("--master needs --experiment and --trial")
        token = cli_headers(args.master)["Authorization"].removeprefix("Bearer ")
        run(args.master, token, args.experiment, args.trial, args)
        return
    with bench_cluster(agent_slots=1) as (_, info):
        token = admin_headers(info.api_url, info.admin_password)["Authorization"]
        experiment_id, trial_ids = seed_search(info.db_url, 40)
        run(info.api_url, token.removeprefix("Bearer "), experiment_id, trial_ids[0], args)


if __name__ == "__main__":
    main()
