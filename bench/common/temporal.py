"""A bench's own Temporal dev server: headless, in a directory, on a free port, stopped when the
block ends."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.processes import free_port
from deploy.temporal_server import TemporalDevServer


@contextmanager
def dev_server(root: Path) -> Iterator[tuple[str, int]]:
    """Its address and pid (benches read its CPU) while the block runs."""
    server = TemporalDevServer(root / "temporal.db", log_file=root / "temporal.log",
                               pid_file=root / "temporal.pid")
    try:
        address = server.start(free_port(), headless=True)
        pid = server.pid()
        assert pid is not None, "the dev server answered without a pid file"
        yield address, pid
    finally:
        server.stop()
