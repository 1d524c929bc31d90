"""How long the everyday `epochal` commands take, from starting the process to its exit.

Starts a local cluster in a temporary state dir on free ports (or uses a running master given with
--master and the CLI's login), writes a finished 40-trial search (--trials) into its database (as
the browser tests do), then runs each command in a fresh subprocess --runs times, after one untimed
run (--warm-ups): `--help`, `experiment list`, `experiment describe ID`, `trial describe ID`,
`user whoami` and `experiment create` (a tiny config; the command's own return, not the
experiment's run). With --load N the same again (or only --load-commands) beside N processes that
keep a CPU busy each. Prints median and p90 per command; the last line is the one-line summary.

The commands are run as `python -m deploy.console` (the installed `epochal`) from each --tree, so
the same run times an older checkout beside this one: `git worktree add /tmp/before <commit>`,
then --tree /tmp/before --tree . (their runs interleave).

    .venv/bin/python bench/cli_latency.py [--runs 10] [--load 0] [--warm-ups 1]
        [--load-commands NAME,...] [--trials 40] [--tree DIR]... [--master URL] [--smoke]
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


def measure(trees: list[Path], env: dict[str, str], cmds: list[tuple[str, list[str]]],
            runs: int, label: str, warm_ups: int = 1) -> list[dict[str, tuple[float, float]]]:
    """Each command's (median, p90) per tree, after `warm_ups` untimed runs (the page cache);
    the trees' runs interleave, so a change in the machine's load falls on all of them alike."""
    took: list[dict[str, list[float]]] = [{name: [] for name, _ in cmds} for _ in trees]
    for name, words in cmds:
        for _ in range(warm_ups):
            for tree in trees:
                time_command(tree, {**env, "PYTHONPATH": str(tree)}, words)
        for _ in range(runs):
            for i, tree in enumerate(trees):
                took[i][name].append(
                    time_command(tree, {**env, "PYTHONPATH": str(tree)}, words))
        cells = "   ".join(f"median {statistics.median(t[name]):6.3f} s p90 "
                           f"{p90(t[name]):6.3f} s" for t in took)
        print(f"{label:<6} {name:<20} {cells}", flush=True)
    return [{name: (statistics.median(v), p90(v)) for name, v in t.items()} for t in took]


def run(master: str, token: str, experiment_id: int, trial_id: int, args: argparse.Namespace
        ) -> None:
    trees = [Path(tree).resolve() for tree in args.tree or [str(REPO)]]
    env = {**os.environ, "EPOCHAL_MASTER": master, "EPOCHAL_TOKEN": token, "COLUMNS": "120"}
    with tempfile.TemporaryDirectory(prefix="epochal-cli-bench-") as scratch:
        cmds = commands(experiment_id, trial_id, tiny_config(Path(scratch)))
        print(f"{args.runs} runs per command, {os.cpu_count()} CPUs; columns: "
              + ", ".join(str(tree) for tree in trees))
        quiet = measure(trees, env, cmds, args.runs, "idle", args.warm_ups)
        loaded = []
        if args.load:
            chosen = args.load_commands.split(",") if args.load_commands else [n for n, _ in cmds]
            if unknown := set(chosen) - {name for name, _ in cmds}:
                raise SystemExit(f"--load-commands: no such command {sorted(unknown)}")
            under_load = [(name, words) for name, words in cmds if name in chosen]
            with busy(args.load):
                loaded = measure(trees, env, under_load, args.runs, f"load{args.load}",
                                 args.warm_ups)
    shown = ("--help", "experiment list", "experiment create")

    def figures(results: list[dict[str, tuple[float, float]]], name: str) -> str:
        return " -> ".join(f"{r[name][0]:.3f}" for r in results) + " s"

    summary = ", ".join(f"{name} {figures(quiet, name)}" for name in shown)
    if loaded:
        summary += f"; beside {args.load} busy CPUs: " + ", ".join(
            f"{name} {figures(loaded, name)}" for name in shown if name in loaded[0])
    print(f"median of {args.runs}: {summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--load", type=int, default=0,
                        help="also time each command beside this many busy CPU processes")
    parser.add_argument("--warm-ups", type=int, default=1,
                        help="untimed runs of each command before its timed ones")
    parser.add_argument("--load-commands",
                        help="with --load: time only these commands (comma-separated names, "
                             "e.g. '--help,experiment list'; default: all)")
    parser.add_argument("--trials", type=int, default=40,
                        help="trials of the seeded finished search")
    parser.add_argument("--tree", action="append",
                        help="a checkout whose CLI is timed, side by side with the other "
                             "--tree's (default: this one)")
    parser.add_argument("--master", help="use this running master instead of a new cluster")
    parser.add_argument("--experiment", type=int, help="with --master: the experiment to describe")
    parser.add_argument("--trial", type=int, help="with --master: the trial to describe")
    add_smoke_option(parser, runs=1, load=1, warm_ups=0, load_commands="--help", trials=1)
    args = parse_args(parser)
    if args.master:
        if args.experiment is None or args.trial is None:
            raise SystemExit("--master needs --experiment and --trial")
        token = cli_headers(args.master)["Authorization"].removeprefix("Bearer ")
        run(args.master, token, args.experiment, args.trial, args)
        return
    with bench_cluster(agent_slots=1) as (_, info):
        token = admin_headers(info.api_url, info.admin_password)["Authorization"]
        experiment_id, trial_ids = seed_search(info.db_url, args.trials)
        run(info.api_url, token.removeprefix("Bearer "), experiment_id, trial_ids[0], args)


if __name__ == "__main__":
    main()
