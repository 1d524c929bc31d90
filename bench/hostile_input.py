"""Hostile experiment configs against the real master: how fast each is refused, what it costs
the master's memory, and whether other users' requests notice.

Starts a local cluster (own PostgreSQL and Temporal in a temporary state dir, free ports), logs
in as admin, then sends each hostile config to `POST /api/v1/experiments` with `validateOnly`
(what `epochal experiment create --test` and any user can send) R times:
  - billion laughs: nine levels of ten YAML aliases, 332 bytes that expand to 10^9 values;
  - 5 MB config:    a description of five million characters;
  - deep nesting:   100,000 nested lists;
  - 1,001 hyperparameters, and a search of 10^9 trials.
For each: the answer's status and the time to it (p50, max). Meanwhile a reader repeats
`GET /api/v1/experiments` on its own connection; its p99 during the attack is printed next to
its p99 before. The master's resident memory (psutil) is read before and after.

    .venv/bin/python bench/hostile_input.py [--repeats 20] [--reads 200] [--smoke]

The last line is the one-line summary.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common.cluster import bench_cluster  # noqa: E402
from bench.common.login import admin_headers  # noqa: E402
from bench.common.smoke import add_smoke_option, parse_args  # noqa: E402
from common.processes import read_pid  # noqa: E402

BASE = {"name": "hostile", "entrypoint": "python3 train.py",
        "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 1}}}


def billion_laughs() -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n" + yaml.safe_dump(BASE)


def config_with(**fields: object) -> str:
    return yaml.safe_dump({**BASE, **fields})


def hostile_configs() -> dict[str, str]:
    return {
        "billion laughs": billion_laughs(),
        "5 MB config": config_with(description="x" * 5_000_000),
        "100,000-deep nesting": "name: " + "[" * 100_000 + "]" * 100_000 + "\n",
        "1,001 hyperparameters": config_with(hyperparameters={f"h{i}": i for i in range(1001)}),
        "10^9 trials": config_with(searcher={"name": "random", "metric": "loss",
                                             "max_trials": 10**9,
                                             "max_length": {"batches": 1}},
                                   hyperparameters={"lr": {"type": "double", "minval": 0.0,
                                                           "maxval": 1.0}}),
    }


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


class Reader(threading.Thread):
    """GET /api/v1/experiments in a loop on its own connection, timing each answer."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(base_url=url, headers=headers, timeout=60)
        self.spans: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while True:  # one read at least, however short the attack
            began = time.perf_counter()
            self.client.get("/api/v1/experiments", params={"limit": 10}).raise_for_status()
            self.spans.append((time.perf_counter() - began) * 1000)
            if self.stop.is_set():
                return


def quiet_p99(url: str, headers: dict[str, str], reads: int) -> float:
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        spans = []
        for _ in range(reads):
            began = time.perf_counter()
            client.get("/api/v1/experiments", params={"limit": 10}).raise_for_status()
            spans.append((time.perf_counter() - began) * 1000)
    return percentile(spans, 99)


def attack(url: str, headers: dict[str, str], repeats: int) -> dict[str, tuple[int, float, float]]:
    results = {}
    with httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        for name, text in hostile_configs().items():
            spans, statuses = [], set()
            for _ in range(repeats):
                began = time.perf_counter()
                answer = client.post("/api/v1/experiments", json={
                    "config": text, "modelDefinition": [], "validateOnly": True})
                spans.append((time.perf_counter() - began) * 1000)
                statuses.add(answer.status_code)
            if statuses - {400, 413}:
                raise SystemExit(f"{name}: answered {sorted(statuses)}, not a refusal")
            (status,) = statuses
            results[name] = (status, statistics.median(spans), max(spans))
            print(f"{name:<24} {status}  p50 {results[name][1]:7.1f} ms  max "
                  f"{results[name][2]:7.1f} ms  ({len(text):,} bytes, {repeats} requests)",
                  flush=True)
    return results


def run(args: argparse.Namespace) -> None:
    with bench_cluster(agent_slots=1) as (settings, info):
        headers = admin_headers(info.api_url, info.admin_password)
        pid = read_pid(settings.pid_file("master"))
        assert pid is not None
        master = psutil.Process(pid)
        idle = quiet_p99(info.api_url, headers, args.reads)
        rss_before = master.memory_info().rss
        reader = Reader(info.api_url, headers)
        reader.start()
        results = attack(info.api_url, headers, args.repeats)
        reader.stop.set()
        reader.join(60)
        rss_after = master.memory_info().rss
    busy = percentile(reader.spans, 99)
    grown = (rss_after - rss_before) / 2**20
    print(f"reads during the attack: {len(reader.spans)}, p99 {busy:.1f} ms "
          f"(quiet: {idle:.1f} ms); master RSS {rss_before / 2**20:.0f} -> "
          f"{rss_after / 2**20:.0f} MiB")
    worst_name, (_, _, worst) = max(results.items(), key=lambda item: item[1][2])
    print(f"summary: every hostile config refused, slowest {worst:.1f} ms max ({worst_name}); "
          f"master RSS {grown:+.0f} MiB; other reads p99 {busy:.1f} ms vs {idle:.1f} ms quiet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="requests per hostile config")
    parser.add_argument("--reads", type=int, default=200, help="quiet reads for the baseline")
    add_smoke_option(parser, repeats=1, reads=1)
    run(parse_args(parser))


if __name__ == "__main__":
    main()
