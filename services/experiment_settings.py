"""What an experiment's owner changes once it is submitted (`det experiment set priority|
max-slots|weight|gc-policy`, `det job update`): kept in its stored config and acted on now, by
its pool's scheduler, its workflow or checkpoint GC."""

from __future__ import annotations

from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from common.expconf import RetentionCounts
from common.states import TERMINAL_STATES
from common.temporal_names import ExperimentMessages, PoolMessages, experiment_workflow_id
from services import checkpoint_files, pool_bindings, pools
from services.errors import Invalid, Unavailable, not_found
from services.settings import StorageSettings
from wire.pools import ExperimentResources, MoveJob, PoolMove


async def _changed_config(pool: asyncpg.Pool, experiment_id: int, section: str,
                          changes: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The stored config with `changes` merged into its `section`, and the experiment's state;
    the row locked while it changes."""
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(
            "SELECT config, state FROM experiments WHERE id = $1 FOR UPDATE", experiment_id)
        if row is None:
            raise not_found("experiment", experiment_id)
        config = row["config"]
        config[section] = {**(config.get(section) or {}), **changes}
        await conn.execute("UPDATE experiments SET config = $2 WHERE id = $1", experiment_id,
                           config)
    return config, row["state"]


async def change_resources(pool: asyncpg.Pool, temporal: Client, experiment_id: int, *,
                           priority: int | None, max_slots: int | None,
                           weight: float | None) -> None:
    """New priority, max_slots or weight: kept in the stored config and, while the experiment
    runs, sent to its pool's scheduler, which applies them to its waiting and later requests."""
    changes = {key: value for key, value in (
        ("priority", priority), ("max_slots", max_slots), ("weight", weight),
    ) if value is not None}
    if not changes:
        return
    config, state = await _changed_config(pool, experiment_id, "resources", changes)
    if state in TERMINAL_STATES:
        return
    change = ExperimentResources(experiment_id=experiment_id, priority=priority,
                                 max_slots=max_slots, weight=weight)
    await pools.signal_scheduler(temporal, config["resources"]["resource_pool"],
                                 PoolMessages.SET_EXPERIMENT_RESOURCES, change)


async def move_job(pool: asyncpg.Pool, temporal: Client, experiment_id: int, *,
                   anchor_id: int, ahead: bool, field: str) -> None:
    """UpdateJobQueue's `aheadOf`/`behindOf` (Determined's web UI, `epochal job update`): the
    experiment's job goes just ahead of (or behind) another waiting job of its pool, taking that
    job's priority (as Determined does); `field` names the request's field in errors."""
    rows = {r["id"]: r for r in await pool.fetch(
        "SELECT id, state, config FROM experiments WHERE id = ANY($1::int[])",
        [experiment_id, anchor_id])}
    if experiment_id not in rows:
        raise not_found("experiment", experiment_id)
    if anchor_id not in rows:
        raise Invalid(f"{field}: no job experiment-{anchor_id}")
    if anchor_id == experiment_id:
        raise Invalid(f"{field}: a job cannot move relative to itself")
    moved, anchor = rows[experiment_id], rows[anchor_id]
    for row in (moved, anchor):
        if row["state"] in TERMINAL_STATES:
            raise Invalid(f"{field}: job experiment-{row['id']} has ended ({row['state']})")
    pool_name = moved["config"]["resources"]["resource_pool"]
    anchor_pool = anchor["config"]["resources"]["resource_pool"]
    if pool_name != anchor_pool:
        raise Invalid(f"{field}: job experiment-{anchor_id} is in resource pool "
                      f"{anchor_pool!r}, experiment-{experiment_id} in {pool_name!r}")
    view = await pools.describe_pool(temporal, pool_name) or {}
    if anchor_id not in {r["experiment_id"] for r in view.get("queue", [])}:
        raise Invalid(f"{field}: job experiment-{anchor_id} is not waiting (it holds the slots "
                      "it asked for): there is no place in the queue to move ahead of or "
                      "behind")
    priority = anchor["config"]["resources"].get("priority")
    if priority is not None and priority != moved["config"]["resources"].get("priority"):
        await _changed_config(pool, experiment_id, "resources", {"priority": priority})
    await pools.signal_scheduler(temporal, pool_name, PoolMessages.MOVE_JOB,
                                 MoveJob(experiment_id, anchor_id, ahead))


async def move_to_pool(pool: asyncpg.Pool, temporal: Client, configured: tuple[str, ...],
                       experiment_id: int, pool_name: str, field: str = "resourcePool") -> None:
    """UpdateJobQueue's `resourcePool` (`det job update --resource-pool`): the experiment's
    trials ask `pool_name` for slots from now on (a waiting request moves at once; a running
    trial keeps its slots until its run ends). The pool must exist, be available to the
    experiment's workspace and be able to hold one of its trials; `field` names it in errors."""
    row = await pool.fetchrow(
        "SELECT e.state, e.config, e.unmanaged, p.workspace_id FROM experiments e"
        " JOIN projects p ON p.id = e.project_id WHERE e.id = $1", experiment_id)
    if row is None:
        raise not_found("experiment", experiment_id)
    if row["state"] in TERMINAL_STATES:
        raise _not_movable(f"{field}: job experiment-{experiment_id} has ended "
                           f"({row['state']})")
    if row["unmanaged"]:
        raise _not_movable(f"{field}: experiment {experiment_id} is unmanaged: its code runs "
                           "outside the cluster and asks no pool for slots")
    resources = row["config"]["resources"]
    if resources["resource_pool"] == pool_name:
        return
    if pool_name not in await pools.pool_names(pool, configured):
        raise _not_movable(f"{field}: no resource pool is named {pool_name[:80]!r}")
    await pool_bindings.check_pool_usable(pool, row["workspace_id"], pool_name, field)
    too_big = await pools.never_fits(temporal, {**resources, "resource_pool": pool_name})
    if too_big is not None:
        raise _not_movable(f"{field}: {too_big}")
    await _changed_config(pool, experiment_id, "resources", {"resource_pool": pool_name})
    handle = temporal.get_workflow_handle(experiment_workflow_id(experiment_id))
    try:
        await handle.signal(ExperimentMessages.MOVE_TO_POOL, PoolMove(pool_name))
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:  # it ended in between: nothing to move
            return
        raise Unavailable(f"cannot reach the experiment's workflow: {err.message}") from err


def _not_movable(detail: str) -> Invalid:
    return Invalid("cannot move the job to that resource pool", [detail])


async def change_gc_policy(pool: asyncpg.Pool, settings: StorageSettings, experiment_id: int,
                           counts: RetentionCounts) -> None:
    """New retention counts in the stored config; an ended experiment's checkpoints are
    collected by them now, a running one's when it ends (as its end always does)."""
    config, state = await _changed_config(pool, experiment_id, "checkpoint_storage",
                                          counts.model_dump())
    if state not in TERMINAL_STATES:
        return
    await checkpoint_files.collect_garbage(pool, experiment_id, config, settings)
