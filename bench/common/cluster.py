"""A bench's own local cluster: a temporary state dir, free ports, Temporal without its UI;
down and removed when the block ends."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common.processes import free_port
from deploy import local_cluster


@contextmanager
def bench_cluster(
    **settings: Any,
) -> Iterator[tuple[local_cluster.ClusterSettings, local_cluster.ClusterInfo]]:
    """`local_cluster.up` with `settings` (agent_slots, agent_runtime, ...) over the defaults."""
    with tempfile.TemporaryDirectory(prefix="epochal-bench-") as state:
        Path(state).chmod(0o755)  # the task user walks through it to its run directories
        chosen = local_cluster.ClusterSettings(
            state_dir=Path(state), api_port=free_port(), temporal_port=free_port(),
            postgres_port=free_port(), headless_temporal=True, **settings)
        info = local_cluster.up(chosen)
        try:
            yield chosen, info
        finally:
            local_cluster.down(chosen)
