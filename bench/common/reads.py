"""Read latency as the benches report it: p50 and p99 of sequential requests over one
keep-alive connection, after a warm-up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

ReadPath = Callable[[], tuple[str, dict[str, Any]]]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def time_reads(api: httpx.Client, name: str, path: ReadPath, requests: int,
               warm_ups: int | None = None) -> tuple[float, float]:
    """(p50, p99) in ms of `requests` GETs of `path()` (called anew for each request), after
    `warm_ups` untimed ones (default: a tenth of `requests`, 10 at least); prints one line with
    the answers' largest size."""
    for _ in range(max(10, requests // 10) if warm_ups is None else warm_ups):
        url, params = path()
        api.get(url, params=params).raise_for_status()
    spans = []
    size = 0
    for _ in range(requests):
        url, params = path()
        began = time.perf_counter()
        answer = api.get(url, params=params)
        spans.append((time.perf_counter() - began) * 1000)
        answer.raise_for_status()
        size = max(size, len(answer.content))
    p50, p99 = percentile(spans, 50), percentile(spans, 99)
    print(f"{name:<32} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  max {max(spans):7.1f} ms  "
          f"({requests} requests, answers up to {size / 1024:.0f} KiB)", flush=True)
    return p50, p99
