"""Shipping a trial's output to the master as task logs (`POST /api/v1/task/logs`).

Lines are buffered and sent in batches every `flush_interval` seconds or every `batch_lines`
lines, whichever comes first. A slow or absent master never blocks the trial: lines wait in
memory (`max_buffered`), then in a spool file on local disk (`harness.spool`, up to
`max_spool_bytes`). Past that bound the head (the oldest lines, still waiting) is kept and so is
a tail of the newest lines, where a traceback would be; the middle is dropped and counted, and a
warning line in its place says how many lines are missing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from agent_worker.runtime import ExitStatus, LogSink
from harness.spool import SpoolQueue

logger = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024
_LEVEL_RE = re.compile(
    r"^\s*(?:\[rank=\d+\]\s*)?\[?(DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL)\]?[:\s]")
_LEVELS = {"WARN": "WARNING"}
_RANK_PREFIX = re.compile(r"^\[rank=\d+\]\s?")
_TRACEBACK_START = "Traceback (most recent call last):"
MAX_EXCEPTION_CHARS = 300  # of the exception a failed run's message names


def log_level(line: str) -> str:
    """Determined's level names, guessed from a leading 'INFO:'/'[ERROR]'; INFO otherwise."""
    m = _LEVEL_RE.match(line)
    name = _LEVELS.get(m.group(1), m.group(1)) if m else "INFO"
    return f"LOG_LEVEL_{name}"


class Tracebacks:
    """Python's tracebacks in a run's output: every line of one is an error (Determined's
    `LOG_LEVEL_ERROR`, which the dashboard's errors filter shows), and the exception line that
    ends the latest says why the run failed. Each rank's lines (`[rank=N] `, interleaved by the
    launcher) are followed apart."""

    def __init__(self) -> None:
        self._inside: set[tuple[str, str]] = set()  # (stream, rank prefix) within a traceback
        self.last_exception: str | None = None

    def level(self, stdtype: str, line: str) -> str | None:
        """LOG_LEVEL_ERROR for a line of a traceback, else None (the line's own level holds)."""
        rank = _RANK_PREFIX.match(line)
        key = (stdtype, rank.group() if rank else "")
        body = line[rank.end():] if rank else line
        if body.startswith(_TRACEBACK_START):
            self._inside.add(key)
            return "LOG_LEVEL_ERROR"
        if key not in self._inside:
            return None
        if body[:1] in (" ", "\t"):  # a frame, its source line, its ^^^ markers
            return "LOG_LEVEL_ERROR"
        self._inside.discard(key)  # `ValueError: bad lr` ends it
        if body.strip():
            self.last_exception = body.strip()[:MAX_EXCEPTION_CHARS]
            return "LOG_LEVEL_ERROR"
        return None


def naming_exception(status: ExitStatus, exception: str | None) -> ExitStatus:
    """A failed run's status, its message naming the exception its output ended a traceback
    with (`exited with code 1 (raised ValueError: bad lr)`), which the trial's and the
    experiment's error then show, not only the exit code."""
    if status.exit_code == 0 or not exception:
        return status
    return dataclasses.replace(status, message=f"{status.message} (raised {exception})")


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
        max_spool_bytes: int = 0,
        spool_dir: Path | None = None,
    ) -> None:
        self._http = http
        self._url = f"{master_url.rstrip('/')}/api/v1/task/logs"
        self._ids = {"taskId": task_id, "allocationId": allocation_id, "agentId": agent_id}
        self._flush_interval = flush_interval
        self._batch_lines = batch_lines
        self._max_post_lines = max(max_post_lines, batch_lines)
        self._max_buffered = max_buffered
        self._buffer = SpoolQueue(memory_items=max(max_buffered, 2), max_bytes=max_spool_bytes,
                                  directory=spool_dir, name=f"logs-{allocation_id}")
        # While the buffer is over its bound: the newest lines (the oldest of them give way).
        self._tail: collections.deque[dict[str, Any]] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0
        self.given_up = 0  # lines still waiting when a close with a timeout gave up
        self._unreported_drops = 0
        self.shipped = 0
        self.tracebacks = Tracebacks()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"log-shipper-{self._url}")

    def add(self, stdtype: str, line: str) -> None:
        """Queue one line; never blocks."""
        entry = self._entry(stdtype, line, self.tracebacks.level(stdtype, line))
        if self._tail is None and self._buffer.put(entry):
            pass
        else:
            if self._tail is None:
                logger.warning("task %s: the master is not taking logs fast enough; keeping the "
                               "first %d and the last %d lines", self._ids["taskId"],
                               len(self._buffer), max(self._max_buffered // 2, 1))
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
            self._buffer.put(self._entry(
                "stderr",
                f"[epochal agent] {self._unreported_drops} log lines were dropped here: the "
                "master did not take them fast enough", level="LOG_LEVEL_WARNING"))
            self._unreported_drops = 0
        for entry in self._tail:  # the buffer is empty: they fit in memory
            self._buffer.put(entry)
        self._tail = None

    def _entry(self, stdtype: str, line: str, level: str | None = None) -> dict[str, Any]:
        return {**self._ids, "timestamp": now_rfc3339(), "level": level or log_level(line),
                "stdtype": stdtype, "log": line}

    @property
    def pending(self) -> int:
        return len(self._buffer) + len(self._tail or ())

    async def close(self, timeout: float | None = 30.0, *,
                    heartbeat: Callable[[], None] | None = None) -> None:
        """Send what is left. With a `timeout`, give up (and say so) after it; with None, wait
        however long the master is away, calling `heartbeat` every few seconds and saying every
        30 s how many lines wait. Called again after a cancelled call, it waits on."""
        self._closing = True
        self._wake.set()
        if self._task is None:
            self.start()
        assert self._task is not None
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        next_note = loop.time() + 30.0
        while not self._task.done():
            now = loop.time()
            if deadline is not None and now >= deadline:
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
                self.given_up = self.pending
                logger.warning("task %s: gave up shipping %d log lines to the master",
                               self._ids["taskId"], self.given_up)
                break
            wait = 5.0 if deadline is None else min(5.0, deadline - now)
            await asyncio.wait({self._task}, timeout=wait)
            if heartbeat is not None:
                heartbeat()
            if loop.time() >= next_note and not self._task.done():
                logger.warning("task %s: %d log lines wait for the master; the run ends once "
                               "they are delivered", self._ids["taskId"], self.pending)
                next_note = loop.time() + 30.0
        self._buffer.close()

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
            batch = self._buffer.peek(self._max_post_lines)
            sent = await self._post(batch)
            if sent:
                self._buffer.drop(len(batch))
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
