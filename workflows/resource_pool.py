"""ResourcePoolWorkflow: the scheduler of one resource pool (`resource-pool-<name>`).

Agents join with signal `register_agent` and leave with `agent_lost`. Trial runs and tasks ask
for slots with the update `request_slots` (sent by the master's activity of that name), which
answers after the next scheduling pass: "granted" with the slots, or "queued" with the place in
the queue, the grant following by signal `slots_granted`; a request that no agent can ever hold
is refused by its validator. Slots go back with signal `release`. All are deduplicated on the
allocation id: a retried request never allocates twice, a repeated release is a no-op.
Handlers only record what arrived; the main loop runs one scheduling pass per workflow task over
every request that arrived (the pool batches, it never schedules per message).

Two older handlers stay for what was started before (workflows that may still send them, and
histories that hold them): signal `request` (answered by `slots_granted` or `slots_failed`),
which trials of revision 0 (started before LOCAL_CALLS_PATCH) send themselves, and update
`release_slots`, which the master's activity sent before it sent `release`. docs/ARCHITECTURE.md,
"Changing workflow code", says when they go.

Order: lower priority number first (Determined's convention, default 42); among experiments of
equal priority the one holding the fewest slots goes first (fair share), oldest request first;
an experiment never holds more than its `resources.max_slots`. A request that does not fit
blocks everything behind it (no backfilling), so a large request is never starved by small ones.

A request goes to one agent when one has the slots (best fit), else to several whole idle agents
of one size (Determined's rule: a trial on several agents uses all the slots of each, so
`slots_per_trial` must be a multiple of that size). It is granted all at once or not at all, in
one pass, so two large requests never hold parts of each other's slots. A request larger than the
pool as it is now waits, told so (signal `slots_waiting`), without holding up the rest, until
agents join; one that no agent size of the pool could ever make up is refused.

Each live agent runs an `agent_liveness` activity on its own task queue that only heartbeats;
when it stops (heartbeat timeout, never picked up, or the agent shutting down), the agent is lost
and its slots are freed. Heartbeats cost no history. Before its history grows large the pool
waits for its handlers to finish and continues as new with its whole state.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter, deque
from collections.abc import Mapping
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from common.states import AllocationState
    from common.temporal_names import (
        AGENT_LIVENESS,
        RESOURCE_POOL_WORKFLOW,
        PoolMessages,
        TrialMessages,
        agent_task_queue,
    )
    from wire.pools import (
        AgentEnabled,
        AgentLivenessInput,
        AgentLost,
        AgentRegistration,
        AgentState,
        Allocation,
        AllocationPart,
        ExperimentResources,
        PoolInput,
        PoolState,
        ReopenTrial,
        SlotFailure,
        SlotRelease,
        SlotReply,
        SlotRequest,
        SlotWaiting,
        allocation_parts,
    )

LIVENESS_HEARTBEAT_TIMEOUT = timedelta(seconds=15)  # twice that to pick it up, else lost
LIVENESS_PERIOD = timedelta(hours=1)  # the activity ends and is renewed this often
RELEASED_KEPT = 2000  # released allocation ids remembered for dedup
OVERRIDES_KEPT = 1000  # experiments whose resources were changed, newest kept
EXPERIMENT_RESOURCES_PATCH = "pool-experiment-resources"
REOPEN_TRIAL_PATCH = "pool-reopen-trial"
MULTI_AGENT_PATCH = "pool-multi-agent"  # requests may span whole agents; too big ones wait
TOO_BIG = "SlotRequestTooBig"


def _iso(ts: object) -> str:
    return ts.isoformat() if hasattr(ts, "isoformat") else str(ts)


def placement(slots: int, free: Mapping[str, int], size: Mapping[str, int],
              spans_agents: bool = True) -> list[str] | None:
    """The agents a request of `slots` gets now, given each agent's free slots and size: the
    best fitting one (the fewest free slots that still has enough; a slot-less task the least
    loaded), else, when it may span agents, whole idle agents of one size that together have
    exactly `slots` (the biggest size that divides it, so the fewest agents); None if it must
    wait. The scheduler places by it, and the API's "waits for" replays it (services/pools.py)."""
    fitting = [(n, agent_id) for agent_id, n in free.items() if n >= slots]
    if fitting:
        return [max(fitting)[1] if slots == 0 else min(fitting)[1]]
    if not spans_agents:
        return None
    by_size: dict[int, list[str]] = {}
    for agent_id, n in free.items():
        if size[agent_id] and n == size[agent_id] and slots % size[agent_id] == 0:
            by_size.setdefault(size[agent_id], []).append(agent_id)
    for each in sorted(by_size, reverse=True):
        if len(by_size[each]) * each >= slots:
            return sorted(by_size[each])[: slots // each]
    return None


@workflow.defn(name=RESOURCE_POOL_WORKFLOW)
class ResourcePoolWorkflow:
    @workflow.init
    def __init__(self, inp: PoolInput) -> None:
        state = inp.state or PoolState()
        self._name = inp.name
        self._max_history = inp.max_history_length
        self._liveness_timeout = (
            timedelta(seconds=inp.liveness_timeout_seconds)
            if inp.liveness_timeout_seconds else LIVENESS_HEARTBEAT_TIMEOUT)
        self._agents: dict[str, AgentState] = {a.agent_id: a for a in state.agents}
        self._pending: dict[str, SlotRequest] = {r.allocation_id: r for r in state.pending}
        self._allocations: dict[str, Allocation] = {a.allocation_id: a for a in state.allocations}
        self._released: list[str] = list(state.released)
        self._released_set = set(self._released)
        self._seq = state.seq
        self._generation = state.generation
        self._overrides: dict[int, ExperimentResources] = {
            o.experiment_id: o for o in state.overrides}
        self._dirty = bool(self._pending)  # a scheduling pass is due
        self._undecided: set[str] = set()  # requests whose update waits for the next pass
        self._positions: dict[str, int] = {}  # queue places of the last pass's new requests
        self._watched: set[tuple[str, str]] = set()  # (agent, boot) with a liveness task
        self._notifying = 0  # grant and failure signals still being sent
        self._told_waiting: set[str] = set(state.told_waiting)  # told they wait for agents

    # -- main loop -------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: PoolInput) -> None:
        for agent in self._agents.values():
            if agent.alive:
                self._watch(agent)
        while True:
            await workflow.wait_condition(lambda: self._dirty or self._ready_to_continue())
            if self._dirty:
                self._dirty = False
                self._schedule()
                continue
            workflow.continue_as_new(
                PoolInput(name=self._name, state=self._snapshot(),
                          max_history_length=inp.max_history_length,
                          liveness_timeout_seconds=inp.liveness_timeout_seconds))

    def _history_is_long(self) -> bool:
        info = workflow.info()
        if self._max_history is not None:
            return info.get_current_history_length() >= self._max_history
        return info.is_continue_as_new_suggested()

    def _ready_to_continue(self) -> bool:
        return (
            self._history_is_long()
            and workflow.all_handlers_finished()
            and not self._undecided
            and self._notifying == 0
        )

    def _snapshot(self) -> PoolState:
        return PoolState(
            agents=list(self._agents.values()),
            pending=sorted(self._pending.values(), key=lambda r: r.seq),
            allocations=list(self._allocations.values()),
            released=self._released[-RELEASED_KEPT:],
            seq=self._seq,
            generation=self._generation + 1,
            overrides=list(self._overrides.values()),
            told_waiting=sorted(self._told_waiting & set(self._pending)),
        )

    # -- scheduling ------------------------------------------------------------------------

    def _free_slots(self) -> dict[str, list[int]]:
        """Free slot ids of every agent that may take new work."""
        used: dict[str, set[int]] = {}
        for a in self._allocations.values():
            for part in allocation_parts(a):
                used.setdefault(part.agent_id, set()).update(part.slot_ids)
        return {
            agent.agent_id: [s for s in agent.slot_ids if s not in used.get(agent.agent_id, set())]
            for agent in self._agents.values()
            if agent.alive and agent.enabled
        }

    def _used_by_experiment(self) -> Counter[int]:
        used: Counter[int] = Counter()
        for a in self._allocations.values():
            used[a.experiment_id] += a.slots
        return used

    def _ordered(
        self, free: dict[str, list[int]] | None
    ) -> list[tuple[SlotRequest, list[str] | None]]:
        """Pending requests in the order they are served, with the agents each one gets (the
        chief first).

        With `free` (the free slots) it places requests until one does not fit, passing over
        those larger than the pool as it is now; without, it gives the queue order as if every
        request were granted (for `describe`). Per priority level, a heap keyed by (slots the
        experiment holds, its oldest request) gives fair share in O(n log experiments).
        """
        used = self._used_by_experiment()
        spans_agents = free is not None and workflow.patched(MULTI_AGENT_PATCH)
        sizes = self._agent_sizes()
        out: list[tuple[SlotRequest, list[str] | None]] = []
        levels: dict[int, dict[int, deque[SlotRequest]]] = {}
        for r in sorted(self._pending.values(), key=lambda r: r.seq):
            levels.setdefault(r.priority, {}).setdefault(r.experiment_id, deque()).append(r)
        for priority in sorted(levels):
            queues = levels[priority]
            heap = [(self._share(used[exp], exp), q[0].seq, exp) for exp, q in queues.items()]
            heapq.heapify(heap)
            capped: list[SlotRequest] = []
            while heap:
                _, _, exp = heapq.heappop(heap)
                queue = queues[exp]
                request = queue[0]
                if request.max_slots is not None and used[exp] + request.slots > request.max_slots:
                    capped.extend(queue)  # waits for its own experiment's slots to come back
                    continue
                agents: list[str] | None = None
                if free is not None:
                    agents = self._place(request.slots, free, spans_agents)
                    if agents is None and spans_agents and self._waits_for_agents(request,
                                                                                  sizes):
                        queue.popleft()  # larger than the pool: it must not hold up the rest
                        if queue:
                            heapq.heappush(heap, (self._share(used[exp], exp), queue[0].seq, exp))
                        continue
                    if agents is None:
                        return out  # it blocks everything behind it: no starvation
                    if len(agents) == 1:
                        free[agents[0]] = free[agents[0]][request.slots:]
                    else:
                        for agent_id in agents:
                            free[agent_id] = []
                out.append((request, agents))
                queue.popleft()
                used[exp] += request.slots
                if queue:
                    heapq.heappush(heap, (self._share(used[exp], exp), queue[0].seq, exp))
            if free is None:
                out.extend((r, None) for r in sorted(capped, key=lambda r: r.seq))
        return out

    def _share(self, used: int, experiment_id: int) -> float:
        """What an experiment holds, scaled by its weight: the fair-share key."""
        override = self._overrides.get(experiment_id)
        if override is None or override.weight is None:
            return used
        return used / override.weight

    def _place(self, slots: int, free: dict[str, list[int]], spans_agents: bool
               ) -> list[str] | None:
        """The agents a request gets now: one, or several whole idle ones; None if it must wait."""
        return placement(slots, {agent_id: len(ids) for agent_id, ids in free.items()},
                         {agent_id: len(self._agents[agent_id].slot_ids) for agent_id in free},
                         spans_agents)

    def _agent_sizes(self) -> Counter[int]:
        """How many agents that take work the pool has, by slot count."""
        return Counter(len(a.slot_ids) for a in self._agents.values()
                       if a.alive and a.enabled and a.slot_ids)

    def _waits_for_agents(self, request: SlotRequest, sizes: Counter[int]) -> bool:
        """Whether the request is larger than the pool as it is now (`sizes`: its agents by
        slot count; even idle), though agents joining could make room for it. A pool with no
        agents yet waits for them anyway."""
        if not sizes or any(size >= request.slots for size in sizes):
            return False
        return not any(request.slots % size == 0 and count * size >= request.slots
                       for size, count in sizes.items())

    def _waiting_message(self, request: SlotRequest, sizes: Counter[int]) -> str:
        have = ", ".join(f"{count} x {size}" for size, count in sorted(sizes.items()))
        return (f"trial {request.trial_id} needs {request.slots} slots; resource pool "
                f"{self._name!r} has agents of {have} slots, so it waits until more agents "
                f"join (a trial on several agents uses all the slots of each)")

    def _schedule(self) -> None:
        free = self._free_slots()
        if self._pending and free:
            now = _iso(workflow.now())
            for request, agents in self._ordered(free):
                assert agents
                parts = [
                    AllocationPart(
                        agent_id=agent_id,
                        task_queue=agent_task_queue(agent_id),
                        slot_ids=self._take(agent_id, request.slots if len(agents) == 1
                                            else len(self._agents[agent_id].slot_ids)),
                        address=self._agents[agent_id].address,
                    )
                    for agent_id in agents
                ]
                allocation = Allocation(
                    allocation_id=request.allocation_id,
                    agent_id=parts[0].agent_id,
                    task_queue=parts[0].task_queue,
                    slot_ids=parts[0].slot_ids,
                    experiment_id=request.experiment_id,
                    trial_id=request.trial_id,
                    slots=request.slots,
                    priority=request.priority,
                    workflow_id=request.workflow_id,
                    requested_at=request.requested_at,
                    granted_at=now,
                    parts=parts if len(parts) > 1 else [],
                )
                del self._pending[request.allocation_id]
                self._told_waiting.discard(request.allocation_id)
                self._allocations[request.allocation_id] = allocation
                if request.allocation_id not in self._undecided:
                    self._send_grant(allocation)
        if self._pending and workflow.patched(MULTI_AGENT_PATCH):
            self._tell_waiting()
        if self._undecided:
            order = [r.allocation_id for r, _ in self._ordered(None)]
            self._positions = {key: i for i, key in enumerate(order) if key in self._undecided}
        self._undecided.clear()

    def _tell_waiting(self) -> None:
        """Tell each trial whose request is larger than the pool, once, that it waits."""
        sizes = self._agent_sizes()
        for request in self._pending.values():  # in arrival order
            key = request.allocation_id
            if key in self._told_waiting or not self._waits_for_agents(request, sizes):
                continue
            self._told_waiting.add(key)
            self._tell_trial(request, TrialMessages.SLOTS_WAITING,
                             SlotWaiting(key, self._waiting_message(request, sizes)))

    def _take(self, agent_id: str, slots: int) -> list[int]:
        used = {s for a in self._allocations.values() for part in allocation_parts(a)
                if part.agent_id == agent_id for s in part.slot_ids}
        return [s for s in self._agents[agent_id].slot_ids if s not in used][:slots]

    def _send_grant(self, allocation: Allocation) -> None:
        self._notifying += 1
        asyncio.create_task(self._notify(allocation))

    def _tell_trial(self, request: SlotRequest, signal: str, message: object) -> None:
        """Signal the trial behind a request (`slots_failed`, `slots_waiting`) in the
        background; a trial that ended meanwhile is only logged."""
        self._notifying += 1

        async def send() -> None:
            try:
                await workflow.get_external_workflow_handle(request.workflow_id).signal(
                    signal, message)
            except Exception as err:  # the trial ended meanwhile
                workflow.logger.warning("trial %s is gone (%s)", request.workflow_id, err)
            finally:
                self._notifying -= 1

        asyncio.create_task(send())

    async def _notify(self, allocation: Allocation) -> None:
        """Tell a waiting trial its slots are granted; if it is gone, take them back."""
        try:
            await workflow.get_external_workflow_handle(allocation.workflow_id).signal(
                TrialMessages.SLOTS_GRANTED, allocation)
        except Exception as err:  # the trial ended meanwhile (not found, or closed)
            workflow.logger.warning("trial %s is gone (%s); releasing %s", allocation.workflow_id,
                                    err, allocation.allocation_id)
            self._release(allocation.allocation_id)
        finally:
            self._notifying -= 1

    def _release(self, allocation_id: str) -> None:
        found = self._allocations.pop(allocation_id, None) or self._pending.pop(
            allocation_id, None)
        if found is not None:
            self._dirty = True
        if allocation_id not in self._released_set:
            self._released.append(allocation_id)
            self._released_set.add(allocation_id)
            if len(self._released) > 2 * RELEASED_KEPT:
                dropped = self._released[:-RELEASED_KEPT]
                self._released = self._released[-RELEASED_KEPT:]
                self._released_set.difference_update(dropped)

    # -- agents ----------------------------------------------------------------------------

    def _watch(self, agent: AgentState) -> None:
        key = (agent.agent_id, agent.boot_id)
        if key not in self._watched:
            self._watched.add(key)
            asyncio.create_task(self._liveness(agent.agent_id, agent.boot_id))

    async def _liveness(self, agent_id: str, boot_id: str) -> None:
        """Run the agent's liveness activity for as long as this boot of the agent lives."""
        reason = "stopped"
        try:
            while self._is_current(agent_id, boot_id):
                try:
                    await workflow.execute_activity(
                        AGENT_LIVENESS,
                        AgentLivenessInput(agent_id=agent_id, boot_id=boot_id, pool=self._name),
                        task_queue=agent_task_queue(agent_id),
                        schedule_to_start_timeout=2 * self._liveness_timeout,
                        start_to_close_timeout=LIVENESS_PERIOD + self._liveness_timeout,
                        heartbeat_timeout=self._liveness_timeout,
                        retry_policy=RetryPolicy(maximum_attempts=1),
                    )
                except ActivityError as err:
                    reason = str(err.cause or err)
                    break
        finally:
            self._watched.discard((agent_id, boot_id))
        self._lose(AgentLost(agent_id=agent_id, boot_id=boot_id, reason=reason))

    def _is_current(self, agent_id: str, boot_id: str) -> bool:
        agent = self._agents.get(agent_id)
        return agent is not None and agent.alive and agent.boot_id == boot_id

    def _lose(self, lost: AgentLost) -> None:
        if not self._is_current(lost.agent_id, lost.boot_id):
            return  # an older boot of an agent that registered again
        agent = self._agents[lost.agent_id]
        agent.alive = False
        agent.lost_reason = lost.reason
        freed = [a for a in self._allocations.values()
                 if any(part.agent_id == lost.agent_id for part in allocation_parts(a))]
        workflow.logger.warning("pool %s: agent %s lost (%s); freeing %d allocations",
                                self._name, lost.agent_id, lost.reason, len(freed))
        # Its runs fail on their own (heartbeat timeout) and ask again; their slots are gone.
        # A run on several agents fails whole: the trial stops its parts on the others.
        for a in freed:
            self._release(a.allocation_id)
        self._dirty = True

    @workflow.signal(name=PoolMessages.REGISTER_AGENT)
    def register_agent(self, reg: AgentRegistration) -> None:
        agent = self._agents.get(reg.agent_id)
        if agent is not None and agent.alive and agent.boot_id == reg.boot_id:
            agent.slot_ids = list(reg.slot_ids)
            agent.address = reg.address or agent.address
            return
        if agent is not None and agent.alive:  # restarted: its old runs are gone
            self._lose(AgentLost(reg.agent_id, agent.boot_id, "restarted"))
        enabled = agent.enabled if agent is not None else reg.enabled
        agent = AgentState(agent_id=reg.agent_id, slot_ids=list(reg.slot_ids),
                           boot_id=reg.boot_id, enabled=enabled, address=reg.address)
        self._agents[reg.agent_id] = agent
        self._watch(agent)
        self._dirty = True

    @workflow.signal(name=PoolMessages.AGENT_LOST)
    def agent_lost(self, lost: AgentLost) -> None:
        self._lose(lost)

    @workflow.signal(name=PoolMessages.SET_AGENT_ENABLED)
    def set_agent_enabled(self, change: AgentEnabled) -> None:
        agent = self._agents.get(change.agent_id)
        if agent is not None and agent.enabled != change.enabled:
            agent.enabled = change.enabled
            self._dirty = True

    # -- trials ----------------------------------------------------------------------------

    def _biggest_agent(self) -> AgentState | None:
        known = [a for a in self._agents.values() if a.alive]
        return max(known, key=lambda a: (len(a.slot_ids), a.agent_id)) if known else None

    def _apply_override(self, request: SlotRequest) -> None:
        override = self._overrides.get(request.experiment_id)
        if override is None:
            return
        if override.priority is not None:
            request.priority = override.priority
        if override.max_slots is not None:
            request.max_slots = override.max_slots

    @workflow.signal(name=PoolMessages.SET_EXPERIMENT_RESOURCES)
    def set_experiment_resources(self, change: ExperimentResources) -> None:
        """The experiment's priority, max_slots or weight changed: its waiting requests and
        every later one follow (running allocations keep their slots)."""
        if not workflow.patched(EXPERIMENT_RESOURCES_PATCH):
            return
        old = self._overrides.pop(change.experiment_id, None) or ExperimentResources(
            change.experiment_id)
        merged = ExperimentResources(
            experiment_id=change.experiment_id,
            priority=change.priority if change.priority is not None else old.priority,
            max_slots=change.max_slots if change.max_slots is not None else old.max_slots,
            weight=change.weight if change.weight is not None else old.weight,
        )
        self._overrides[change.experiment_id] = merged  # newest last
        while len(self._overrides) > OVERRIDES_KEPT:
            del self._overrides[next(iter(self._overrides))]
        for request in self._pending.values():
            if request.experiment_id == change.experiment_id:
                self._apply_override(request)
        self._dirty = True

    def _enqueue(self, request: SlotRequest) -> None:
        self._apply_override(request)
        self._seq += 1
        request.seq = self._seq
        request.requested_at = _iso(workflow.now())
        self._pending[request.allocation_id] = request
        self._dirty = True

    @workflow.signal(name=PoolMessages.REQUEST)
    def request(self, request: SlotRequest) -> None:
        """A trial wants slots; it hears back by signal (`slots_granted` or `slots_failed`).

        The old protocol, kept while a trial of revision 0 may run: one started by an
        experiment that did not take LOCAL_CALLS_PATCH ("master-activities-run-locally") sends
        it from its own code (workflows/allocation.py). Nothing else sends it: it goes with
        that marker (docs/ARCHITECTURE.md, "Changing workflow code")."""
        key = request.allocation_id
        if key in self._allocations:  # a repeated request: say it again
            self._send_grant(self._allocations[key])
            return
        if key in self._pending or key in self._released_set:
            return
        error = self._never_fits(request, workflow.patched(MULTI_AGENT_PATCH))
        if error is not None:
            self._tell_trial(request, TrialMessages.SLOTS_FAILED, SlotFailure(key, error))
            return
        self._enqueue(request)

    @workflow.update(name=PoolMessages.REQUEST_SLOTS)
    async def request_slots(self, request: SlotRequest) -> SlotReply:
        key = request.allocation_id
        if key in self._allocations:
            return SlotReply(status=AllocationState.GRANTED, allocation=self._allocations[key])
        if key in self._released_set:
            raise ApplicationError(f"allocation {key} was already released",
                                   type="AllocationReleased", non_retryable=True)
        if key not in self._pending:
            self._enqueue(request)
            self._undecided.add(key)
            await workflow.wait_condition(lambda: key not in self._undecided)
        if key in self._allocations:
            return SlotReply(status=AllocationState.GRANTED, allocation=self._allocations[key])
        return SlotReply(status=AllocationState.QUEUED, position=self._positions.get(key, 0))

    @request_slots.validator
    def _validate_request(self, request: SlotRequest) -> None:
        if request.allocation_id in self._allocations or request.allocation_id in self._pending:
            return
        # A validator may not call workflow.patched; a refused update leaves no history.
        error = self._never_fits(request, spans_agents=True)
        if error is not None:
            raise ApplicationError(error, type=TOO_BIG, non_retryable=True)

    def _never_fits(self, request: SlotRequest, spans_agents: bool) -> str | None:
        """Why the pool can never hold the request, if it cannot: more than the experiment's
        max_slots, or more than the biggest agent and a multiple of no agent size the pool has
        (a trial on several agents uses all the slots of each)."""
        override = self._overrides.get(request.experiment_id)
        max_slots = request.max_slots
        if override is not None and override.max_slots is not None:
            max_slots = override.max_slots
        who = f"trial {request.trial_id}" if request.trial_id else "each trial"
        if max_slots is not None and request.slots > max_slots:
            return (f"{who} needs {request.slots} slots but its experiment "
                    f"may use at most resources.max_slots={max_slots}")
        biggest = self._biggest_agent()
        if biggest is None or len(biggest.slot_ids) >= request.slots:
            return None
        if not spans_agents:
            return (f"{who} needs {request.slots} slots but the biggest "
                    f"agent of resource pool {self._name!r} ({biggest.agent_id}) has "
                    f"{len(biggest.slot_ids)}")
        sizes = sorted({len(a.slot_ids) for a in self._agents.values() if a.alive and a.slot_ids})
        if any(request.slots % size == 0 for size in sizes):
            return None
        return (f"{who} needs {request.slots} slots: more than the biggest "
                f"agent of resource pool {self._name!r} ({biggest.agent_id}) has "
                f"({len(biggest.slot_ids)}), and a trial on several agents uses all the slots "
                f"of each, but {request.slots} is a multiple of no agent size there "
                f"({', '.join(map(str, sizes))}): set resources.slots_per_trial to a multiple "
                "of one")

    @workflow.query(name=PoolMessages.CHECK_REQUEST)
    def check_request(self, request: SlotRequest) -> str | None:
        """Why the pool could never hold such a request (None if it could): the API asks before
        it stores an experiment, so a trial that can never run is refused at submission."""
        return self._never_fits(request, spans_agents=True)

    @workflow.update(name=PoolMessages.RELEASE_SLOTS)
    def release_slots(self, release: SlotRelease) -> bool:
        """True if the allocation (or the waiting request) was still held.

        The old protocol: nothing sends it any more (the `release_slots` activity sends the
        `release` signal since LOCAL_CALLS_PATCH's release), but a pool's run whose history
        holds one replays only with it (tests/replay/histories/pool-continue-as-new*). It goes
        once no pool run started before then may be replayed, the release after the one that
        removes LOCAL_CALLS_PATCH's old paths (docs/ARCHITECTURE.md, "Changing workflow
        code")."""
        held = release.allocation_id in self._allocations or (
            release.allocation_id in self._pending)
        self._release(release.allocation_id)
        return held

    @workflow.signal(name=PoolMessages.REOPEN_TRIAL)
    def reopen_trial(self, trial: ReopenTrial) -> None:
        """Forget the released allocations of a trial that is continued: its new runs reuse
        the allocation ids `<experiment>.<trial>.<run>` from run 1."""
        if not workflow.patched(REOPEN_TRIAL_PATCH):
            return
        prefix = f"{trial.experiment_id}.{trial.trial_id}."
        forgotten = {key for key in self._released_set if key.startswith(prefix)}
        if forgotten:
            self._released = [key for key in self._released if key not in forgotten]
            self._released_set -= forgotten

    @workflow.signal(name=PoolMessages.RELEASE)
    def release(self, release: SlotRelease) -> None:
        """Slots given back: the one protocol for a release (the `release_slots` activity sends
        it for a trial since LOCAL_CALLS_PATCH, and every task; older trials send it
        themselves)."""
        self._release(release.allocation_id)

    # -- reading ---------------------------------------------------------------------------

    @workflow.query(name=PoolMessages.DESCRIBE)
    def describe(self) -> dict[str, object]:
        """Agents with their slots, running allocations, and the queue in the order served."""
        by_agent: dict[str, list[tuple[Allocation, AllocationPart]]] = {}
        for a in self._allocations.values():
            for part in allocation_parts(a):
                by_agent.setdefault(part.agent_id, []).append((a, part))
        queue = [r for r, _ in self._ordered(None)]
        sizes = self._agent_sizes()
        return {
            "name": self._name,
            "generation": self._generation,
            "agents": [
                {
                    "id": agent.agent_id,
                    "slotIds": agent.slot_ids,
                    "enabled": agent.enabled,
                    "alive": agent.alive,
                    "lostReason": agent.lost_reason,
                    "address": agent.address,
                    "allocations": [
                        {"allocationId": a.allocation_id, "slotIds": part.slot_ids,
                         "experimentId": a.experiment_id, "trialId": a.trial_id}
                        for a, part in by_agent.get(agent.agent_id, [])
                    ],
                }
                for agent in sorted(self._agents.values(), key=lambda a: a.agent_id)
            ],
            "allocations": [vars(a) for a in self._allocations.values()],
            "queue": [{**vars(r), "waiting": self._waiting_message(r, sizes)}
                      if self._waits_for_agents(r, sizes) else vars(r) for r in queue],
            "experimentResources": [vars(o) for o in self._overrides.values()],
        }
