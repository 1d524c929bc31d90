"""Activities that record experiment and trial state in PostgreSQL for the workflows.

Each one is idempotent: Temporal retries an activity whose result it did not see, so running one
twice must leave the same rows as running it once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
from temporalio import activity

from activities.allocation_history import record_trial_allocation
from activities.checkpoint_gc import (
    completed_checkpoints,
    delete_marked_files,
    dropped_by,
    inside_storage,
    mark_deleted,
    policy_of,
)
from common.checkpoint_storage import CheckpointFiles, StorageError
from common.states import CheckpointState, TrialState
from common.temporal_names import (
    CHECK_SEARCHER_METRIC,
    CREATE_TRIAL,
    FINISH_EXPERIMENT,
    GET_RESUME_POINT,
    RECORD_EXPERIMENT_STATE,
    RECORD_SEARCH,
    RECORD_TRIAL_STATE,
    REQUEST_PREEMPTION,
    WRITE_TRIAL_LOG,
)
from wire.workflow_io import (
    CheckSearcherMetricInput,
    CreateTrialInput,
    FinishExperimentInput,
    RecordExperimentStateInput,
    RecordSearchInput,
    RecordTrialStateInput,
    RequestPreemptionInput,
    ResumePoint,
    TrialLogInput,
)

HEARTBEAT_EVERY = 5.0  # seconds; well within the workflow's FINISH_HEARTBEAT


@contextlib.asynccontextmanager
async def heartbeating(every: float) -> AsyncIterator[None]:
    """Heartbeat the running activity every `every` seconds while the block runs (its slow
    parts run in threads, so the event loop stays free to)."""
    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class ExperimentStore:
    """Activities bound to the master's connection pool (and the cluster's default checkpoint
    storage, whose keys delete its checkpoints)."""

    def __init__(self, pool: asyncpg.Pool,
                 cluster_storage: dict[str, Any] | None = None) -> None:
        self._pool = pool
        self._cluster_storage = cluster_storage

    @activity.defn(name=CREATE_TRIAL)
    async def create_trial(self, inp: CreateTrialInput) -> int:
        trial_id: int = await self._pool.fetchval(
            "INSERT INTO trials (experiment_id, request_id, hparams, seed, search_length, rung)"
            " VALUES ($1, $2, $3, $4, $5, CASE WHEN $5::bigint IS NULL THEN NULL ELSE 0 END)"
            " ON CONFLICT (experiment_id, request_id)"
            " DO UPDATE SET request_id = EXCLUDED.request_id"
            " RETURNING id",
            inp.experiment_id,
            inp.request_id,
            inp.hparams,
            inp.trial_seed,
            inp.search_length,
        )
        return trial_id

    @activity.defn(name=RECORD_SEARCH)
    async def record_search(self, inp: RecordSearchInput) -> None:
        await self._pool.execute(
            "UPDATE trials SET search_length = $2, rung = $3, search_status = $4 WHERE id = $1",
            inp.trial_id,
            inp.search_length,
            inp.rung,
            inp.status,
        )

    @activity.defn(name=CHECK_SEARCHER_METRIC)
    async def check_searcher_metric(self, inp: CheckSearcherMetricInput) -> str | None:
        """None when the trial reported the searcher metric in a validation (at or past
        `min_length`); otherwise a message naming the missing metric and what was reported."""
        length = (
            "steps_completed"
            if inp.time_metric is None
            else "CASE WHEN jsonb_typeof(metrics -> $4) = 'number'"
            " THEN (metrics ->> $4)::float8 END"
        )
        args: list[Any] = [inp.trial_id, inp.metric, inp.min_length]
        if inp.time_metric is not None:
            args.append(inp.time_metric)
        found = await self._pool.fetchval(
            "SELECT EXISTS (SELECT 1 FROM metrics WHERE trial_id = $1"
            " AND metric_group = 'validation' AND jsonb_typeof(metrics -> $2) = 'number'"
            f" AND {length} >= $3)",
            *args,
        )
        if found:
            return None
        names: list[str] = await self._pool.fetchval(
            "SELECT coalesce(array_agg(DISTINCT k ORDER BY k), '{}') FROM metrics,"
            " jsonb_object_keys(metrics) AS k WHERE trial_id = $1 AND metric_group = 'validation'",
            inp.trial_id,
        )
        unit = inp.time_metric or "length"
        where = f" at or past {unit} {inp.min_length}" if inp.min_length else ""
        reported = ", ".join(names) if names else "no validation metrics at all"
        return (
            f'the training code never reported the searcher metric "{inp.metric}" in a '
            f"validation{where} (it reported: {reported})"
        )

    @activity.defn(name=WRITE_TRIAL_LOG)
    async def write_trial_log(self, inp: TrialLogInput) -> None:
        """A line from the master in a trial's logs, beside what its process printed."""
        await self._pool.execute(
            "INSERT INTO task_logs (trial_id, task_id, allocation_id, agent_id, stdtype, level,"
            " log) VALUES ($1, $2, $3, $4, 'master', $5, $6)",
            inp.trial_id,
            inp.task_id,
            inp.allocation_id,
            inp.agent_id,
            inp.level,
            inp.log,
        )

    @activity.defn(name=RECORD_EXPERIMENT_STATE)
    async def record_experiment_state(self, inp: RecordExperimentStateInput) -> None:
        await self._pool.execute(
            "UPDATE experiments SET state = $2,"
            " end_time = CASE WHEN $3 THEN coalesce(end_time, now()) ELSE NULL END"
            " WHERE id = $1",
            inp.experiment_id,
            inp.state,
            inp.ended,
        )

    @activity.defn(name=RECORD_TRIAL_STATE)
    async def record_trial_state(self, inp: RecordTrialStateInput) -> None:
        """The trial's state; at its end, the session its runs' code had (DET_USER_TOKEN) is
        revoked with it. With it, the allocation history: RUNNING with a run id starts that
        run's allocation, any other state ends the trial's open one
        (activities/allocation_history.py)."""
        async with self._pool.acquire() as conn, conn.transaction():
            await self._record_trial_state(conn, inp)
            running = inp.state == TrialState.RUNNING and inp.run_id is not None
            await record_trial_allocation(conn, inp.trial_id,
                                          inp.run_id if running else None,
                                          inp.agent_ids or ([inp.agent_id] if inp.agent_id
                                                            else []))

    @staticmethod
    async def _record_trial_state(conn: asyncpg.Connection, inp: RecordTrialStateInput) -> None:
        await conn.execute(
            "WITH ended AS (DELETE FROM user_sessions WHERE $5 AND token_hash ="
            " (SELECT session_hash FROM trials WHERE id = $1))"
            " UPDATE trials SET state = $2,"
            " restarts = coalesce($3, restarts),"
            " run_id = coalesce($4, run_id),"
            " preempt_requested = CASE WHEN $4::int IS NOT NULL THEN false"
            "                     ELSE preempt_requested END,"
            " end_time = CASE WHEN $5 THEN coalesce(end_time, now()) ELSE NULL END,"
            " agent_id = coalesce($6, agent_id),"
            " search_status = coalesce($7, search_status),"
            " session_hash = CASE WHEN $5 THEN NULL ELSE session_hash END"
            " WHERE id = $1",
            inp.trial_id,
            inp.state,
            inp.restarts,
            inp.run_id,
            inp.ended,
            inp.agent_id,
            inp.search_status,
        )

    @activity.defn(name=REQUEST_PREEMPTION)
    async def request_preemption(self, inp: RequestPreemptionInput) -> None:
        await self._pool.execute(
            "UPDATE trials SET preempt_requested = $2 WHERE id = $1", inp.trial_id, inp.preempt
        )

    @activity.defn(name=GET_RESUME_POINT)
    async def get_resume_point(self, trial_id: int) -> ResumePoint:
        """Where the trial's next run starts: its newest checkpoint and that checkpoint's step."""
        row = await self._pool.fetchrow(
            "SELECT c.uuid::text AS uuid, c.steps_completed, t.early_exit_reason"
            " FROM trials t LEFT JOIN LATERAL ("
            "   SELECT uuid, steps_completed FROM checkpoints"
            f"   WHERE trial_id = t.id AND state = '{CheckpointState.COMPLETED}'"
            "   ORDER BY steps_completed DESC, report_time DESC LIMIT 1) c ON true"
            " WHERE t.id = $1",
            trial_id,
        )
        if row is None:
            return ResumePoint(latest_checkpoint=None, steps_completed=0)
        return ResumePoint(
            latest_checkpoint=row["uuid"],
            steps_completed=row["steps_completed"] or 0,
            early_exit_reason=row["early_exit_reason"],
        )

    @activity.defn(name=FINISH_EXPERIMENT)
    async def finish_experiment(self, inp: FinishExperimentInput) -> int | None:
        """Record the final state and best trial, then delete checkpoints the policy drops;
        heartbeating throughout (the workflow may ask for it: FINISH_HEARTBEAT_PATCH)."""
        async with heartbeating(HEARTBEAT_EVERY):
            return await self._finish_experiment(inp)

    async def _finish_experiment(self, inp: FinishExperimentInput) -> int | None:
        config = await self._pool.fetchval(
            "SELECT config FROM experiments WHERE id = $1", inp.experiment_id
        )
        rows = await completed_checkpoints(self._pool, inp.experiment_id)
        best_trial_id: int | None = await self._pool.fetchval(
            "SELECT best_trial($1)", inp.experiment_id)
        try:
            files: CheckpointFiles | None = CheckpointFiles.of(config, self._cluster_storage)
        except StorageError as err:
            activity.logger.error("experiment %d: checkpoint files kept: %s",
                                  inp.experiment_id, err)
            files = None
        candidates = inside_storage(dropped_by(rows, config, policy_of(config)), files)
        async with self._pool.acquire() as conn, conn.transaction():
            await mark_deleted(conn, candidates)
            await conn.execute(
                "UPDATE experiments SET state = $2, best_trial_id = $3, error = $4,"
                " end_time = coalesce(end_time, now()) WHERE id = $1",
                inp.experiment_id,
                inp.state,
                best_trial_id,
                inp.error,
            )
        # Files go after the rows say DELETED, so a retry after a crash finishes the job.
        if files is not None:
            await delete_marked_files(self._pool, inp.experiment_id, files)
        return best_trial_id

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of this class, for the worker."""
        return [
            self.create_trial,
            self.record_search,
            self.check_searcher_metric,
            self.write_trial_log,
            self.record_experiment_state,
            self.record_trial_state,
            self.request_preemption,
            self.get_resume_point,
            self.finish_experiment,
        ]
