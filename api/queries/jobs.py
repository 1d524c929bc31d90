"""What Determined's job list shows of the experiments behind the jobs."""

from __future__ import annotations

import asyncpg

from api.queries import Conn


async def fetch_job_experiments(conn: Conn, experiment_ids: list[int]) -> list[asyncpg.Record]:
    """The experiments' name, owner (and their user id), start, resources and workspace."""
    rows: list[asyncpg.Record] = await conn.fetch(
        "SELECT e.id, e.name, e.owner, e.start_time, e.config -> 'resources' AS resources,"
        " p.workspace_id, coalesce((SELECT id FROM users WHERE username = e.owner), 1) AS uid"
        " FROM experiments e JOIN projects p ON p.id = e.project_id WHERE e.id = ANY($1)",
        experiment_ids,
    )
    return rows
