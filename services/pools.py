"""The resource pools' schedulers (`ResourcePoolWorkflow`) as the API asks and tells them: what a
pool holds and queues (its `describe` query), whether a request could ever fit (`check_request`),
the job queue Determined's clients show, and the signals the API sends a pool: among them a
slot disabled or enabled (`det slot disable|enable`), which the database keeps
(`disabled_slots`) and the pool is told again whenever the agent registers a new boot."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import asyncpg
from temporalio.client import Client
from temporalio.service import RPCError

from activities.pool_start import signal_pool
from common.states import JobState, TaskState
from common.temporal_names import PoolMessages, resource_pool_workflow_id
from services.errors import NotFound, Unavailable
from wire.pools import SlotEnabled, SlotRequest
from workflows.resource_pool import placement

__all__ = ["describe_pool", "disabled_slots", "job_id", "job_queue", "never_fits", "pool_names",
           "pool_views", "resend_disabled_slots", "set_slot_enabled", "signal_pool",
           "signal_scheduler", "slot_ids", "waits_for"]


async def describe_pool(temporal: Client, pool_name: str) -> dict[str, Any] | None:
    """The pool scheduler's `describe` answer; None if it does not run (or does not answer)."""
    handle = temporal.get_workflow_handle(resource_pool_workflow_id(pool_name))
    try:
        answer: dict[str, Any] = await asyncio.wait_for(handle.query(PoolMessages.DESCRIBE), 10)
    except Exception:  # not started yet, or busy: show what the database has
        return None
    return answer


async def pool_views(temporal: Client, names: set[str]) -> dict[str, dict[str, Any]]:
    """`describe_pool` of each pool that answers, by name."""
    ordered = sorted(names)
    answers = await asyncio.gather(*(describe_pool(temporal, n) for n in ordered))
    return {n: a for n, a in zip(ordered, answers, strict=True) if a is not None}


async def never_fits(temporal: Client, resources: dict[str, Any]) -> str | None:
    """Why the config's resource pool could never hold one of its trials (the pool's
    `check_request` query); None if it could, or if the pool does not answer (not started)."""
    pool_name = str(resources.get("resource_pool") or "default")
    request = SlotRequest(allocation_id="", workflow_id="", experiment_id=0, trial_id=0,
                          slots=int(resources.get("slots_per_trial") or 0),
                          max_slots=resources.get("max_slots"))
    handle = temporal.get_workflow_handle(resource_pool_workflow_id(pool_name))
    try:
        answer = await asyncio.wait_for(handle.query(PoolMessages.CHECK_REQUEST, request), 2)
    except Exception:  # not started yet, busy, or an older pool without the query
        return None
    return str(answer) if answer else None


async def signal_scheduler(temporal: Client, pool_name: str, signal: str, message: object) -> None:
    """`signal_pool` (which starts the pool's scheduler if it does not run), refused as
    Unavailable when Temporal cannot be reached."""
    try:
        await signal_pool(temporal, pool_name, signal, message)
    except RPCError as err:
        raise Unavailable(f"cannot reach the scheduler: {err.message}") from err


def slot_ids(slots: list[dict[str, Any]]) -> list[int]:
    """The numbers a pool knows an agent's slots by, in the order it registered them: each
    slot's id as a number ("0" -> 0), else its place in the list."""
    ids = []
    for i, s in enumerate(slots):
        try:
            ids.append(int(s.get("id", i)))
        except (TypeError, ValueError):
            ids.append(i)
    return ids


def _slot_number(slots: list[dict[str, Any]], slot_id: str) -> int | None:
    for s, number in zip(slots, slot_ids(slots), strict=True):
        if str(s.get("id")) == slot_id:
            return number
    return None


async def disabled_slots(pool: asyncpg.Pool, agent_id: str | None = None
                         ) -> dict[tuple[str, str], str]:
    """The slots disabled (of every agent, or the one named), by (agent id, slot id): the
    reason given."""
    rows = await pool.fetch(
        "SELECT agent_id, slot_id, reason FROM disabled_slots"
        " WHERE $1::text IS NULL OR agent_id = $1", agent_id)
    return {(r["agent_id"], r["slot_id"]): r["reason"] for r in rows}


async def set_slot_enabled(pool: asyncpg.Pool, temporal: Client, agent_id: str, slot_id: str,
                           enabled: bool, reason: str, by: str | None) -> None:
    """Enable or disable one slot of an agent (`det slot enable|disable`): kept in the
    database, as the agent's own enabled flag is, and told to its pool (signal
    `set_slot_enabled`): a disabled slot finishes what runs on it and is given no new work."""
    agent = await pool.fetchrow("SELECT resource_pool, slots FROM agents WHERE id = $1",
                                agent_id)
    if agent is None:
        raise NotFound(f"agent {agent_id} not found", [f"agentId: no agent has id {agent_id!r}"])
    number = _slot_number(agent["slots"], slot_id)
    if number is None:
        have = ", ".join(str(s.get("id")) for s in agent["slots"]) or "none"
        raise NotFound(f"slot {slot_id} not found on agent {agent_id}", [
            f"slotId: agent {agent_id!r} has no slot {slot_id!r} (its slots: {have})"])
    if enabled:
        await pool.execute("DELETE FROM disabled_slots WHERE agent_id = $1 AND slot_id = $2",
                           agent_id, slot_id)
    else:
        await pool.execute(
            "INSERT INTO disabled_slots (agent_id, slot_id, reason, disabled_by)"
            " VALUES ($1, $2, $3, $4) ON CONFLICT (agent_id, slot_id) DO UPDATE SET"
            " reason = EXCLUDED.reason, disabled_by = EXCLUDED.disabled_by, disabled_at = now()",
            agent_id, slot_id, reason, by)
    await signal_scheduler(temporal, agent["resource_pool"], PoolMessages.SET_SLOT_ENABLED,
                           SlotEnabled(agent_id=agent_id, slot_id=number, enabled=enabled,
                                       reason="" if enabled else reason))


async def resend_disabled_slots(pool: asyncpg.Pool, temporal: Client, pool_name: str,
                                agent_id: str, slots: list[dict[str, Any]]) -> None:
    """Tell the pool, after an agent's new boot registered, which of its slots are disabled
    (a slot the agent no longer has stays disabled in the database, unsent)."""
    disabled = await disabled_slots(pool, agent_id)
    for (_, slot_id), reason in sorted(disabled.items()):
        number = _slot_number(slots, slot_id)
        if number is not None:
            await signal_scheduler(temporal, pool_name, PoolMessages.SET_SLOT_ENABLED,
                                   SlotEnabled(agent_id=agent_id, slot_id=number,
                                               enabled=False, reason=reason))


async def pool_names(pool: asyncpg.Pool, configured: tuple[str, ...]) -> list[str]:
    """The configured pools and those agents registered in, sorted."""
    registered = {r["resource_pool"] for r in await pool.fetch(
        "SELECT DISTINCT resource_pool FROM agents")}
    return sorted(set(configured) | registered)


async def job_queue(pool: asyncpg.Pool, temporal: Client, configured: tuple[str, ...],
                    resource_pool: str | None) -> list[dict[str, Any]]:
    """Experiments' and interactive tasks' jobs holding or waiting for slots in `resource_pool`
    (else in every pool), in the scheduler's order (`_jobs_of`)."""
    names = {resource_pool} if resource_pool else set(await pool_names(pool, configured))
    views = await pool_views(temporal, names)
    tasks = await pool.fetch(
        "SELECT id, task_type, created_at FROM tasks WHERE state <> $1", TaskState.TERMINATED)
    experiment_ids = sorted({e["experiment_id"] for v in views.values()
                             for e in [*v.get("allocations", []), *v.get("queue", [])]
                             if e["experiment_id"]})
    experiments = await pool.fetch(
        "SELECT id, start_time FROM experiments WHERE id = ANY($1::int[])", experiment_ids)
    submitted = {r["id"]: r["created_at"] for r in tasks} | {
        job_id(r["id"]): r["start_time"] for r in experiments}
    task_types = {r["id"]: r["task_type"] for r in tasks}
    return [j for name in sorted(views)
            for j in _jobs_of(name, views[name], task_types, submitted)]


def job_id(experiment_id: int) -> str:
    """An experiment's job in the job queue (GET /job-queues)."""
    return f"experiment-{experiment_id}"


def _job_key(entry: dict[str, Any]) -> str:
    """The job a pool's allocation or request belongs to: its experiment's, or (experiment 0)
    the interactive task's, whose allocation id is `<task id>.1`."""
    experiment_id = entry["experiment_id"]
    return job_id(experiment_id) if experiment_id else entry["allocation_id"].rsplit(".", 1)[0]


def _jobs_of(pool_name: str, view: dict[str, Any], task_types: dict[str, str],
             submitted: dict[str, datetime]) -> list[dict[str, Any]]:
    """One job per experiment, and one per interactive task (its requests name experiment 0;
    `task_types` gives the tasks' types by id), in Determined's v1Job shape: slots held
    (`allocatedSlots`) among those it needs (`requestedSlots`), an experiment's trials running
    and queued (None for a task: it has no trials), and what a waiting job waits for.

    The scheduler's order: the jobs it serves (holding slots) first, then those that wait; each
    by priority, then (a waiting job) its place in the pool's queue where it has one (where
    UpdateJobQueue's aheadOf/behindOf moved it, else its oldest waiting request's arrival), then
    when it was submitted (`submitted`, by job id; else its first request to the pool), so an
    earlier job of a priority is listed before a later one."""
    by_job: dict[str, dict[str, Any]] = {}
    first_asked: dict[str, datetime] = {}
    overrides = {o["experiment_id"]: o["priority"] for o in view.get("experimentResources", [])
                 if o.get("priority") is not None}
    # Where the pool serves a waiting job among its priority (ResourcePoolWorkflow._position).
    moved = {int(k): float(v) for k, v in (view.get("queuePositions") or {}).items()}
    arrived: dict[str, float] = {}

    def job(entry: dict[str, Any]) -> dict[str, Any]:
        experiment_id, key = entry["experiment_id"], _job_key(entry)
        asked = _parse_time(entry.get("requested_at"))
        if asked is not None and (key not in first_asked or asked < first_asked[key]):
            first_asked[key] = asked
        if key in by_job:
            return by_job[key]
        job_type, entity, trials = (
            ("TYPE_EXPERIMENT", str(experiment_id), 0) if experiment_id
            else (f"TYPE_{task_types.get(key, 'GENERIC')}", key, None))
        return by_job.setdefault(key, {
            "jobId": key, "type": job_type, "entityId": entity, "resourcePool": pool_name,
            "priority": overrides.get(experiment_id, entry["priority"]) if experiment_id
            else entry["priority"], "allocatedSlots": 0, "requestedSlots": 0,
            "runningTrials": trials, "queuedTrials": trials, "holding": False,
        })

    for a in view.get("allocations", []):
        j = job(a)
        j["allocatedSlots"] += a["slots"]
        j["requestedSlots"] += a["slots"]
        j["holding"] = True
        if j["runningTrials"] is not None:
            j["runningTrials"] += 1
    queued: set[str] = set()
    for r, reason in zip(view.get("queue", []), waits_for(pool_name, view), strict=True):
        j = job(r)
        if r.get("seq") is not None:
            arrived[j["jobId"]] = min(arrived.get(j["jobId"], float("inf")), float(r["seq"]))
        if j["jobId"] not in queued:  # its first request in the queue: the job's priority now
            queued.add(j["jobId"])
            j["priority"] = overrides.get(r["experiment_id"], r["priority"])
            j["waiting"] = reason
        j["requestedSlots"] += r["slots"]
        if j["queuedTrials"] is not None:
            j["queuedTrials"] += 1
    never = datetime.max.replace(tzinfo=UTC)
    for key, j in by_job.items():
        when = submitted.get(key) or first_asked.get(key)
        j["submissionTime"] = when.isoformat() if when is not None else None
        place = None if j["holding"] else moved.get(
            int(j["entityId"]) if j["type"] == "TYPE_EXPERIMENT" else -1, arrived.get(key))
        j["_order"] = (not j["holding"], j["priority"],
                       place if place is not None else float("inf"), when or never,
                       j["type"] != "TYPE_EXPERIMENT", int(j["entityId"] or 0)
                       if j["entityId"].isdigit() else 0, j["entityId"])
    ordered = sorted(by_job.values(), key=lambda j: j["_order"])
    for ahead, j in enumerate(ordered):
        state = f"STATE_{JobState.SCHEDULED if j.pop('holding') else JobState.QUEUED}"
        j["summary"] = {"state": state, "jobsAhead": ahead}
        del j["_order"]
    return ordered


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def waits_for(pool_name: str, view: dict[str, Any]) -> list[str]:
    """What each request of the pool's queue (its `describe` answer, in the order served) waits
    for, as the scheduler's next pass would see it: the pool's free slots, taken by the requests
    before it (best fit on one agent, else whole idle agents of one size), a request capped by
    its experiment's `max_slots`, one larger than the pool as it is now (passed over: it waits
    for agents), and the first that does not fit, which holds up everything behind it."""
    agents = [a for a in view.get("agents", []) if a.get("alive") and a.get("enabled")]
    size = {a["id"]: len(a["slotIds"]) for a in agents}
    free = {a["id"]: len(_free_slots(a)) for a in agents}
    used: Counter[int] = Counter()
    for a in view.get("allocations", []):
        used[a["experiment_id"]] += a["slots"]
    off = len(view.get("agents", [])) - len(agents)
    aside = f" ({off} agent{'s' if off != 1 else ''} lost or disabled)" if off else ""
    blocker: str | None = None
    reasons = []
    for r in view.get("queue", []):
        slots, experiment_id, cap = r["slots"], r["experiment_id"], r.get("max_slots")
        if not agents:
            reasons.append(f"{_count(slots, 'slot')}; no agent in pool {pool_name}{aside}")
        elif blocker is not None:
            reasons.append(f"behind job {blocker}")
        elif experiment_id and cap is not None and used[experiment_id] + slots > cap:
            reasons.append(f"{_count(slots, 'slot')}; its experiment holds {used[experiment_id]}"
                           f" of its max_slots ({cap})")
        elif (placed := placement(slots, free, size)) is not None:
            for agent_id in placed:
                free[agent_id] = free[agent_id] - slots if len(placed) == 1 else 0
            used[experiment_id] += slots
            reasons.append(f"the scheduler's next pass ({_count(slots, 'slot')} free)")
        elif r.get("waiting"):  # the pool's own verdict: larger than the pool as it is now
            have = ", ".join(f"{n} x {s}" for s, n in sorted(Counter(size.values()).items()))
            reasons.append(f"no agent has {_count(slots, 'slot')}, nor can pool {pool_name}'s"
                           f" agents ({have} slots) make them up: it waits for agents to join")
        else:
            total, most = sum(free.values()), max(free.values(), default=0)
            spread = f", at most {most} on one agent" if total >= slots else ""
            reasons.append(f"{_count(slots, 'slot')}; {total} free in pool {pool_name}"
                           f"{spread}{aside}")
            blocker = _job_key(r)
    return reasons


def _free_slots(agent: dict[str, Any]) -> set[int]:
    """An agent's slots (its `describe` entry) that hold nothing and are not disabled (the
    pool's `disabledSlots`: slot ids, or a mapping of them to reasons)."""
    held = {int(i) for x in agent.get("allocations") or [] for i in x.get("slotIds") or []}
    disabled = {int(i) for i in agent.get("disabledSlots") or ()}
    return {int(i) for i in agent["slotIds"]} - held - disabled


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
