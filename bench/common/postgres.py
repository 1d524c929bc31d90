"""A bench's own PostgreSQL: embedded, in a directory, on a free port, stopped when the block
ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common import processes
from deploy.postgres import EmbeddedPostgres


@contextmanager
def postgres(root: Path) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(root / "postgres", log_file=root / "postgres.log")
    server.start(processes.free_port())
    try:
        yield server
    finally:
        server.stop()
