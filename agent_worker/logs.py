"""Shipping a trial's output to the master as task logs (`POST /api/v1/task/logs`).

Lines are buffered and sent in batches every `flush_interval` seconds or every `batch_lines`
lines, whichever comes first. A slow or absent master never blocks the trial: the buffer is
bounded. Past the bound the head (the oldest lines, still waiting) is kept and so is a tail of
the newest lines, where a traceback would be; the middle is dropped and counted, and a warning
line in its place says how many lines are missing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import re
from datetime import UTC, datetime
from typing import Any

import httpx

from agent_worker.runtime import LogSink

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024
_LEVEL_RE = re.compile(
    r"^\s*(?:\[rank=\d+\]\s*)?\[?(DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL)\]?[:\s]")
_LEVELS = {"WARN": "WARNING"}


def log_level(line: str) -> str:
    """Determined's level names, guessed from a leading 'INFO:'/'[ERROR]'; INFO otherwise."""
    m = _LEVEL_RE.match(line)
    name = _LEVELS.get(m.group(1), m.group(1)) if m else "INFO"
    return f"LOG_LEVEL_{name}"


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


class LogShipper:
    def __init__(
        self,
        http: httpx.AsyncClient,
        master_url: str,
        *,
        task_id: str,
        allocation_id: str,
        agent_id: str,
        flush_interval: float = 0.5,
        batch_lines: int = 200,
        max_post_lines: int = 1000,
        max_buffered: int = 100_000,
    ) -> None:
        self._http = http
        self._url = f"{master_url.rstrip('/')}/api/v1/task/logs"
        self._ids = {"taskId": task_id, "allocationId": allocation_id, "agentId": agent_id}
        self._flush_interval = flush_interval
        self._batch_lines = batch_lines
        self._max_post_lines = max(max_post_lines, batch_lines)
        self._max_buffered = max_buffered
        self._buffer: collections.deque[dict[str, Any]] = collections.deque()
        # While the buffer is over its bound: the newest lines (the oldest of them give way).
        self._tail: collections.deque[dict[str, Any]] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self._unreported_drops = 0
        self.shipped = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"log-shipper-{self._url}")

    def add(self, stdtype: str, line: str) -> None:
        """Queue one line; never blocks."""
        entry = self._entry(stdtype, line)
        if self._tail is None and len(self._buffer) < self._max_buffered:
            self._buffer.append(entry)
        else:
            if self._tail is None:
                logger.warning("task %s: the master is not taking logs fast enough; keeping the "
                               "first %d and the last %d lines", self._ids["taskId"],
                               len(self._buffer), self._max_buffered // 2)
                self._tail = collections.deque(maxlen=max(self._max_buffered // 2, 1))
            if len(self._tail) == self._tail.maxlen:
                self.dropped += 1
                self._unreported_drops += 1
            self._tail.append(entry)
        if len(self._buffer) >= self._batch_lines:
            self._wake.set()

    def _join_tail(self) -> None:
        """Once the head is sent: the gap's warning line, then the tail."""
        if self._tail is None:
            return
        if self._unreported_drops:
            self._buffer.append(self._entry(
                "stderr",
                f"[epochal agent] {self._unreported_drops} log lines were dropped here: the "
                "master did not take them fast enough", level="LOG_LEVEL_WARNING"))
            self._unreported_drops = 0
        self._buffer.extend(self._tail)
        self._tail = None

    def _entry(self, stdtype: str, line: str, level: str | None = None) -> dict[str, Any]:
        return {**self._ids, "timestamp": now_rfc3339(), "level": level or log_level(line),
                "stdtype": stdtype, "log": line}

    @property
    def pending(self) -> int:
        return len(self._buffer) + len(self._tail or ())

    async def close(self, timeout: float = 30.0) -> None:
        """Send what is left, giving up (and saying so) after `timeout` seconds."""
        self._closing = True
        self._wake.set()
        if self._task is None:
            self.start()
        assert self._task is not None
        done, _ = await asyncio.wait({self._task}, timeout=timeout)
        if not done:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            logger.warning("task %s: gave up shipping %d log lines to the master",
                           self._ids["taskId"], self.pending)

    async def _run(self) -> None:
        failures = 0
        while True:
            if not self._closing and len(self._buffer) < self._batch_lines:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._flush_interval)
                self._wake.clear()
            if not self._buffer:
                self._join_tail()
            if not self._buffer:
                if self._closing:
                    return
                continue
            batch = list(itertools.islice(self._buffer, self._max_post_lines))
            sent = await self._post(batch)
            if sent:
                for _ in batch:
                    self._buffer.popleft()
                if sent == "ok":
                    self.shipped += len(batch)
                failures = 0
            else:
                failures += 1
                await asyncio.sleep(min(self._flush_interval * 2**failures, 5.0))

    async def _post(self, batch: list[dict[str, Any]]) -> str | None:
        """'ok', 'rejected' (dropped: a retry cannot help) or None (try again)."""
        try:
            resp = await self._http.post(self._url, json={"logs": batch}, timeout=10.0)
        except httpx.HTTPError as err:
            logger.warning("task %s: cannot ship logs (%s); retrying", self._ids["taskId"], err)
            return None
        if resp.is_success:
            return "ok"
        if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
            logger.error("task %s: the master rejected %d log lines: HTTP %s %s",
                         self._ids["taskId"], len(batch), resp.status_code, resp.text[:300])
            return "rejected"
        logger.warning("task %s: cannot ship logs (HTTP %s); retrying", self._ids["taskId"],
                       resp.status_code)
        return None


async def pump_lines(stream: asyncio.StreamReader, stdtype: str, sink: LogSink) -> None:
    """Read `stream` to its end, handing each line (without its newline) to `sink`.

    Lines longer than 64 KiB are cut into pieces, so a progress bar without newlines cannot
    grow without bound.
    """
    pending = b""
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for raw in lines:
            _add_cut(sink, stdtype, raw)
        if len(pending) >= MAX_LINE_BYTES:
            cut = len(pending) - len(pending) % MAX_LINE_BYTES
            _add_cut(sink, stdtype, pending[:cut])
            pending = pending[cut:]
    if pending:
        _add_cut(sink, stdtype, pending)


def _add_cut(sink: LogSink, stdtype: str, raw: bytes) -> None:
    for start in range(0, max(len(raw), 1), MAX_LINE_BYTES):
        sink.add(stdtype, _decode(raw[start:start + MAX_LINE_BYTES]))


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")
