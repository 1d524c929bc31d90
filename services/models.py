"""The model registry as other concepts meet it: an experiment with checkpoints registered as
model versions keeps them (its deletion is refused, as in Determined)."""

from __future__ import annotations

import asyncpg


async def registered_versions(conn: asyncpg.Pool | asyncpg.Connection,
                              experiment_id: int) -> list[str]:
    """`model:version` for each version registered from the experiment's checkpoints."""
    rows = await conn.fetch(
        "SELECT m.name, v.version FROM model_versions v JOIN models m ON m.id = v.model_id"
        " JOIN checkpoints c ON c.uuid = v.checkpoint_uuid JOIN trials t ON t.id = c.trial_id"
        " WHERE t.experiment_id = $1 ORDER BY m.name, v.version", experiment_id)
    return [f"{r['name']}:{r['version']}" for r in rows]
