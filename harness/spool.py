"""A first-in-first-out queue of JSON items that spills from memory to a file on local disk.

Reports and log lines wait here while the master is away, however long that is: the oldest
`memory_items` stay in memory, later ones go to a file (created only then), and the whole queue
is bounded by `max_bytes` of JSON on disk; `put` answers False when the bound would be passed,
so the caller can say so. Shared by the harness's metrics sender and the agent's log shipper.
Not thread-safe: callers hold their own lock.
"""

from __future__ import annotations

import collections
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Any


class SpoolQueue:
    def __init__(self, *, memory_items: int, max_bytes: int, directory: str | Path | None = None,
                 name: str = "spool") -> None:
        if memory_items < 1 or max_bytes < 0:
            raise ValueError("memory_items must be >= 1 and max_bytes >= 0")
        self.memory_items = memory_items
        self.max_bytes = max_bytes
        self._directory = directory
        self._name = name
        self._memory: collections.deque[Any] = collections.deque()
        self._path: Path | None = None
        self._writer: IO[str] | None = None
        self._read_offset = 0
        self._disk_items = 0
        self.disk_bytes = 0  # JSON on disk not yet read back

    def __len__(self) -> int:
        return len(self._memory) + self._disk_items

    @property
    def on_disk(self) -> int:
        return self._disk_items

    def put(self, item: Any) -> bool:
        """Queue `item` last; False (and nothing queued) when the disk bound would be passed."""
        if not self._disk_items and len(self._memory) < self.memory_items:
            self._memory.append(item)
            return True
        line = json.dumps(item, separators=(",", ":")) + "\n"
        size = len(line.encode())
        if self.disk_bytes + size > self.max_bytes:
            return False
        if self._writer is None:
            self._open()
        assert self._writer is not None
        self._writer.write(line)
        self._disk_items += 1
        self.disk_bytes += size
        return True

    def peek(self, count: int) -> list[Any]:
        """The oldest `count` items (fewer if the queue holds fewer), left in the queue."""
        if len(self._memory) < count and self._disk_items:
            self._load(max(count, self.memory_items) - len(self._memory))
        return [self._memory[i] for i in range(min(count, len(self._memory)))]

    def drop(self, count: int) -> None:
        """Remove the oldest `count` items, which `peek` returned."""
        for _ in range(count):
            self._memory.popleft()

    def close(self) -> None:
        """Forget everything and remove the file."""
        self._memory.clear()
        self._reset_file()

    def _open(self) -> None:
        directory = self._directory or tempfile.gettempdir()
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=f"{self._name}-", suffix=".jsonl", dir=directory)
        self._path = Path(path)
        self._writer = os.fdopen(fd, "w", encoding="utf-8")
        self._read_offset = 0

    def _load(self, count: int) -> None:
        assert self._writer is not None and self._path is not None
        self._writer.flush()
        with self._path.open("rb") as reader:
            reader.seek(self._read_offset)
            for _ in range(min(count, self._disk_items)):
                raw = reader.readline()
                self._memory.append(json.loads(raw))
                self._disk_items -= 1
                self.disk_bytes -= len(raw)
            self._read_offset = reader.tell()
        if not self._disk_items:
            self._reset_file()

    def _reset_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._path is not None:
            self._path.unlink(missing_ok=True)
            self._path = None
        self._disk_items = 0
        self.disk_bytes = 0
        self._read_offset = 0
