"""The master's own recent log records, kept in memory for `det master logs` (admins only).

A `logging.Handler` on the root logger keeps the newest records in a ring bounded by count and
by bytes; each record's text is cut to a bound too. Nothing is written anywhere: a restart
starts an empty ring, as Determined's master does. The master attaches it at boot
(deploy/master.py) so that its first records are kept; the API finds the same one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

MAX_RECORDS = 10_000
MAX_BYTES = 8 << 20
MAX_MESSAGE = 8 << 10


@dataclass(frozen=True)
class Entry:
    id: int
    created: float  # seconds since the epoch
    levelno: int
    message: str
    size: int  # the message's bytes in UTF-8, which the ring's bound counts


class MasterLogBuffer(logging.Handler):
    """The newest records (at most `max_records` and `max_bytes` of text), oldest first."""

    def __init__(self, *, max_records: int = MAX_RECORDS, max_bytes: int = MAX_BYTES,
                 max_message: int = MAX_MESSAGE) -> None:
        super().__init__()
        self.max_records, self.max_bytes, self.max_message = max_records, max_bytes, max_message
        self._entries: deque[Entry] = deque()
        self._bytes = 0
        self._next_id = 0
        self._exceptions = logging.Formatter()
        self._guard = threading.Lock()  # emit runs in any thread; readers in the event loop

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.name}: {record.getMessage()}"
            if record.exc_info:
                text += "\n" + self._exceptions.formatException(record.exc_info)
        except Exception:  # a record whose arguments do not format: keep what can be said
            text = f"{record.name}: {record.msg!r} (its arguments did not format)"
        if len(text) > self.max_message:
            cut = len(text) - self.max_message
            text = f"{text[:self.max_message]} ... ({cut} characters cut)"
        size = len(text.encode("utf-8", "replace"))
        with self._guard:
            self._entries.append(Entry(self._next_id, record.created or time.time(),
                                       record.levelno, text, size))
            self._next_id += 1
            self._bytes += size
            while self._entries and (len(self._entries) > self.max_records
                                     or self._bytes > self.max_bytes):
                self._bytes -= self._entries.popleft().size

    def entries(self, *, after_id: int = -1) -> list[Entry]:
        """A copy of the records kept with ids above `after_id`, oldest first."""
        with self._guard:
            if not self._entries or self._entries[-1].id <= after_id:
                return []
            return [e for e in self._entries if e.id > after_id]


def attach(logger: logging.Logger | None = None) -> MasterLogBuffer:
    """The buffer on `logger` (the root logger), attached now if it has none."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if isinstance(handler, MasterLogBuffer):
            return handler
    buffer = MasterLogBuffer()
    target.addHandler(buffer)
    return buffer


LEVELS = ((logging.CRITICAL, "LOG_LEVEL_CRITICAL"), (logging.ERROR, "LOG_LEVEL_ERROR"),
          (logging.WARNING, "LOG_LEVEL_WARNING"), (logging.INFO, "LOG_LEVEL_INFO"),
          (logging.DEBUG, "LOG_LEVEL_DEBUG"))


def level_name(levelno: int) -> str:
    """Determined's v1LogLevel for a Python level (below DEBUG is TRACE)."""
    return next((name for bound, name in LEVELS if levelno >= bound), "LOG_LEVEL_TRACE")
