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

Order: lower priority number first (Determined's convention, default 42); within a priority,
fair share (the workspace, then the user, then the experiment holding the fewest slots), then
the job's place in the queue; an experiment never holds more than its `resources.max_slots`, a
workspace more than its cap. From SHARED_CLUSTER_PATCH on, a request that does not fit reserves
agents (preempting strictly lower-priority runs where the pool's policy preempts), and requests
behind it backfill the other agents' free slots, so a large request is never starved by small
ones; before it (and with `backfill: false`) it blocks everything behind it.

The reservation rule (STEADY_RESERVATION_PATCH on): the head, the first request in that order
that cannot be placed and preempts nothing, keeps agents that can hold it: the ones it (or the
head before it) kept in the last pass, unless one of them took work since, else those with the
most free slots. Nothing behind the head is placed on its agents, so no backfilled job delays
it: it waits only for the work its agents held when it kept them (or less, where room appears
first), and for requests ahead of it in the order (higher priority, or a fairer share), which
may take their slots first. Before the patch each pass kept the agents with the most free slots
anew, so when another agent freed more the reservation moved there, the agent it left was
backfilled, and a large request waited for one agent's work after another while the slots
kept for it sat idle (bench/scheduler_policy.py --explain: 8% of the slot-seconds while jobs
waited).

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
        MoveJob,
        PoolInput,
        PoolPolicy,
        PoolState,
        Preemption,
        ReopenTrial,
        SlotEnabled,
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
# Issue 38: preemption by priority, backfilling with reservations, fair share across workspaces
# and users, workspace slot caps, disabled slots and moved jobs (docs/ARCHITECTURE.md,
# "Scheduling").
SHARED_CLUSTER_PATCH = "pool-shared-cluster"
# The head request keeps the agents it reserved across passes (the module's reservation rule).
STEADY_RESERVATION_PATCH = "pool-steady-reservation"
TOO_BIG = "SlotRequestTooBig"


def _iso(ts: object) -> str:
    return ts.isoformat() if hasattr(ts, "isoformat") else str(ts)


def _desc(text: str) -> list[int]:
    """A sort key that orders strings (RFC 3339 times) newest first."""
    return [-ord(c) for c in text]


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
        self._policy = inp.policy or PoolPolicy()
        self._preempting: set[str] = set(state.preempting)  # allocations told to give slots back
        self._queue_positions: dict[int, float] = dict(state.queue_positions)
        # SHARED_CLUSTER_PATCH, decided by the first scheduling pass of each run (queries, which
        # may not ask `patched`, read it)
        self._shared = False
        # STEADY_RESERVATION_PATCH, decided with it: the head keeps the agents it kept in the
        # last pass (`_head_agents`) while they can still hold it
        self._steady = False
        self._head_agents: list[str] = list(state.head_agents)

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
                          liveness_timeout_seconds=inp.liveness_timeout_seconds,
                          policy=inp.policy))

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
            preempting=sorted(self._preempting & set(self._allocations)),
            queue_positions=dict(self._queue_positions),
            head_agents=list(self._head_agents),
        )

    # -- scheduling ------------------------------------------------------------------------

    def _free_slots(self) -> dict[str, list[int]]:
        """Free slot ids of every agent that may take new work."""
        used: dict[str, set[int]] = {}
        for a in self._allocations.values():
            for part in allocation_parts(a):
                used.setdefault(part.agent_id, set()).update(part.slot_ids)
        return {
            agent.agent_id: [s for s in agent.slot_ids if s not in used.get(agent.agent_id, set())
                             and s not in agent.disabled_slots]
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

    # -- the shared cluster's policy (SHARED_CLUSTER_PATCH) ------------------------------------

    def _shares(self) -> tuple[Counter[int], Counter[int | None], Counter[int | None]]:
        """Slots held by each experiment, user and workspace: the fair-share keys."""
        by_experiment: Counter[int] = Counter()
        by_user: Counter[int | None] = Counter()
        by_workspace: Counter[int | None] = Counter()
        for a in self._allocations.values():
            by_experiment[a.experiment_id] += a.slots
            by_user[a.user_id] += a.slots
            by_workspace[a.workspace_id] += a.slots
        return by_experiment, by_user, by_workspace

    def _position(self, experiment_id: int, oldest: SlotRequest) -> float:
        """A job's place in its priority level: where `move_job` put it, else its oldest
        request's arrival."""
        return self._queue_positions.get(experiment_id, float(oldest.seq))

    def _shared_order(
        self, free: dict[str, list[int]] | None
    ) -> tuple[list[tuple[SlotRequest, list[str] | None]], list[tuple[Allocation, SlotRequest]]]:
        """The requests served now, with their agents, and the allocations to preempt for
        those that cannot be (with the request each is preempted for).

        Order: priority; then fair share, the workspace holding the fewest slots first, then
        the user, then the experiment (scaled by its weight); then the job's place in the
        queue. Caps: the experiment's max_slots and the workspace's. A request that cannot be
        placed reserves agents, so that nothing behind it takes the slots it waits for: those of
        strictly lower-priority work it preempts (when the pool preempts), else, for the first
        such request only, the agents it fits best once their work ends; requests behind it are
        placed on the other agents' free slots (backfilling, when the pool backfills; else it
        blocks them all, the old rule). From STEADY_RESERVATION_PATCH on the head keeps the same
        agents pass after pass (the module's reservation rule) and the pass records them in
        `_head_agents`. Without `free`, the queue order as if every request were granted (for
        `describe`)."""
        policy = self._policy
        by_experiment, by_user, by_workspace = self._shares()
        spans_agents = free is not None and workflow.patched(MULTI_AGENT_PATCH)
        sizes = self._agent_sizes()
        avail = dict(free) if free is not None else None
        out: list[tuple[SlotRequest, list[str] | None]] = []
        victims: list[tuple[Allocation, SlotRequest]] = []
        coming_free = self._coming_free()
        reserved: set[str] = set()
        head_reserved = False
        sticky: set[str] = set()  # the head's agents of the last pass that took no work since
        if avail is not None and self._steady:
            sticky = set(self._head_agents)
            self._head_agents = []
        levels: dict[int, dict[int, deque[SlotRequest]]] = {}
        for r in sorted(self._pending.values(), key=lambda r: r.seq):
            levels.setdefault(r.priority, {}).setdefault(r.experiment_id, deque()).append(r)

        def key(exp: int, queue: deque[SlotRequest]) -> tuple[float, float, float, float, int]:
            first = queue[0]
            return (by_workspace[first.workspace_id], by_user[first.user_id],
                    self._share(by_experiment[exp], exp), self._position(exp, first), first.seq)

        for priority in sorted(levels):
            queues = levels[priority]
            heap = [(key(exp, q), exp) for exp, q in queues.items()]
            heapq.heapify(heap)
            capped: list[SlotRequest] = []
            while heap:
                was, exp = heapq.heappop(heap)
                queue = queues[exp]
                now = key(exp, queue)
                if now != was:  # its workspace or user was granted slots since: keys only grow
                    heapq.heappush(heap, (now, exp))
                    continue
                request = queue.popleft()
                if self._capped(request, by_experiment, by_workspace):
                    capped.extend([request, *queue])  # waits for its own slots to come back
                    continue
                agents: list[str] | None = None
                if avail is not None:
                    agents = self._place(request.slots, avail, spans_agents)
                    if agents is None and not (spans_agents
                                               and self._waits_for_agents(request, sizes)):
                        kept, chosen, is_head = self._reserve(request, avail, coming_free,
                                                              reserved, spans_agents,
                                                              head_reserved, sticky)
                        victims.extend((a, request) for a in chosen)
                        head_reserved = head_reserved or is_head
                        if is_head and self._steady:
                            self._head_agents = kept
                        for agent_id in kept:
                            reserved.add(agent_id)
                            avail[agent_id] = []  # nothing behind it takes these slots
                        if not policy.backfill:
                            return out, victims
                    if agents is None:  # it waits; the rest may use other agents' slots
                        if queue:
                            heapq.heappush(heap, (key(exp, queue), exp))
                        continue
                    if len(agents) == 1:
                        avail[agents[0]] = avail[agents[0]][request.slots:]
                    else:
                        for agent_id in agents:
                            avail[agent_id] = []
                    sticky.difference_update(agents)  # fresh work: no head's to wait for
                out.append((request, agents))
                by_experiment[exp] += request.slots
                by_user[request.user_id] += request.slots
                by_workspace[request.workspace_id] += request.slots
                if queue:
                    heapq.heappush(heap, (key(exp, queue), exp))
            if free is None:
                out.extend((r, None) for r in sorted(capped, key=lambda r: r.seq))
        return out, victims

    def _capped(self, request: SlotRequest, by_experiment: Counter[int],
                by_workspace: Counter[int | None]) -> bool:
        """Whether the request must wait for its experiment's or workspace's own slots."""
        if (request.max_slots is not None
                and by_experiment[request.experiment_id] + request.slots > request.max_slots):
            return True
        return (request.workspace_max_slots is not None and request.workspace_id is not None
                and by_workspace[request.workspace_id] + request.slots
                > request.workspace_max_slots)

    def _coming_free(self) -> dict[str, int]:
        """Slots per agent that allocations told to give them back will free."""
        coming: Counter[str] = Counter()
        for key in self._preempting:
            allocation = self._allocations.get(key)
            if allocation is not None:
                for part in allocation_parts(allocation):
                    coming[part.agent_id] += len(part.slot_ids)
        return dict(coming)

    def _preemptible(self, allocation: Allocation, request: SlotRequest) -> bool:
        """Whether the allocation may be preempted for the request: strictly lower priority,
        not told already, and a task only where the pool preempts tasks."""
        return (self._policy.preemption
                and allocation.priority > request.priority
                and allocation.allocation_id not in self._preempting
                and (not allocation.task or self._policy.preempt_tasks))

    def _reserve(self, request: SlotRequest, avail: dict[str, list[int]],
                 coming_free: dict[str, int], reserved: set[str], spans_agents: bool,
                 head_reserved: bool, sticky: set[str]
                 ) -> tuple[list[str], list[Allocation], bool]:
        """For a request that cannot be placed now: the agents it keeps for itself, the
        lower-priority allocations to preempt for it, and whether it is the head's reservation
        (none preempted or on their way out). Preemption picks the agents that lose the fewest
        slots, taking the lowest-priority, then the newest, work first; slots already on their
        way back count as free. Without preemption only the first such request (the head)
        reserves: the agents with the most free slots that can hold it, so backfilled requests
        never starve it; from STEADY_RESERVATION_PATCH on, first the agents of `sticky` (those
        the head kept in the last pass and that took no work since), so it does not lose the
        slots its agents drained for it."""
        groups = self._agent_groups(request.slots, avail, reserved, spans_agents, sticky)
        on_agent: dict[str, list[Allocation]] = {}
        for a in self._allocations.values():
            for part in allocation_parts(a):
                on_agent.setdefault(part.agent_id, []).append(a)
        best: tuple[int, int, list[str], list[Allocation]] | None = None
        for agents in groups:
            have = sum(len(avail[a]) + coming_free.get(a, 0) for a in agents)
            chosen: list[Allocation] = []
            held = sorted({a.allocation_id: a for agent_id in agents
                           for a in on_agent.get(agent_id, [])}.values(),
                          key=lambda a: (-a.priority, _desc(a.granted_at), a.allocation_id))
            for allocation in held:
                if have >= request.slots:
                    break
                if self._preemptible(allocation, request):
                    chosen.append(allocation)
                    have += sum(len(p.slot_ids) for p in allocation_parts(allocation)
                                if p.agent_id in agents)
            if have < request.slots:
                continue
            candidate = (sum(a.slots for a in chosen),
                         -sum(len(avail[a]) for a in agents), agents, chosen)
            if best is None or candidate[:3] < best[:3]:
                best = candidate
        if best is not None:
            return best[2], best[3], False
        if head_reserved or not groups:
            return [], [], False
        agents = min(groups, key=lambda g: (not set(g) <= sticky,
                                            -sum(len(avail[a]) for a in g), g))
        return agents, [], True

    def _agent_groups(self, slots: int, avail: dict[str, list[int]], reserved: set[str],
                      spans_agents: bool, sticky: set[str]) -> list[list[str]]:
        """Where `slots` could go once work ends, among the agents not reserved in this pass:
        each agent with that many usable slots, else (spanning agents) whole agents of one
        size, the biggest size that divides `slots`, those in `sticky` (kept for the head) and
        then those with the most free slots first."""
        usable = {agent_id: len([s for s in self._agents[agent_id].slot_ids
                                 if s not in self._agents[agent_id].disabled_slots])
                  for agent_id in sorted(avail) if agent_id not in reserved}
        singles = [[agent_id] for agent_id, n in usable.items() if n >= slots]
        if singles or not spans_agents:
            return singles
        by_size: dict[int, list[str]] = {}
        for agent_id, n in usable.items():
            if n and n == len(self._agents[agent_id].slot_ids) and slots % n == 0:
                by_size.setdefault(n, []).append(agent_id)
        for size in sorted(by_size, reverse=True):
            if len(by_size[size]) * size >= slots:
                agents = sorted(by_size[size], key=lambda a: (
                    a not in sticky, -len(avail[a]), a))
                return [sorted(agents[: slots // size])]
        return []

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

    def _queue_order(self) -> list[SlotRequest]:
        """Every waiting request in the order served, as if each were granted."""
        if self._shared:
            return [r for r, _ in self._shared_order(None)[0]]
        return [r for r, _ in self._ordered(None)]

    def _schedule(self) -> None:
        self._shared = workflow.patched(SHARED_CLUSTER_PATCH)
        self._steady = self._shared and workflow.patched(STEADY_RESERVATION_PATCH)
        free = self._free_slots()
        victims: list[tuple[Allocation, SlotRequest]] = []
        if self._pending and free:
            now = _iso(workflow.now())
            if self._shared:
                placed, victims = self._shared_order(free)
            else:
                placed = self._ordered(free)
            for request, agents in placed:
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
                    user_id=request.user_id,
                    workspace_id=request.workspace_id,
                    task=request.task,
                )
                del self._pending[request.allocation_id]
                self._told_waiting.discard(request.allocation_id)
                self._allocations[request.allocation_id] = allocation
                if request.allocation_id not in self._undecided:
                    self._send_grant(allocation)
        for allocation, request in victims:
            self._preempt(allocation, request)
        if self._pending and workflow.patched(MULTI_AGENT_PATCH):
            self._tell_waiting()
        if self._undecided:
            order = [r.allocation_id for r in self._queue_order()]
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

    def _preempt(self, allocation: Allocation, request: SlotRequest) -> None:
        """Ask the run behind a lower-priority allocation to checkpoint and give its slots
        back (its trial queues again and resumes from that checkpoint)."""
        self._preempting.add(allocation.allocation_id)
        asker = (f"task {request.allocation_id}" if request.task else
                 f"trial {request.trial_id} of experiment {request.experiment_id}")
        reason = (f"resource pool {self._name!r} needs its slots for higher-priority work: "
                  f"{asker} (priority {request.priority}; this run's is {allocation.priority})")
        workflow.logger.info("pool %s: preempting %s for %s", self._name,
                             allocation.allocation_id, request.allocation_id)
        self._signal(allocation.workflow_id, TrialMessages.PREEMPT,
                     Preemption(allocation_id=allocation.allocation_id, reason=reason,
                                grace_seconds=self._policy.preemption_timeout_seconds))

    def _take(self, agent_id: str, slots: int) -> list[int]:
        used = {s for a in self._allocations.values() for part in allocation_parts(a)
                if part.agent_id == agent_id for s in part.slot_ids}
        agent = self._agents[agent_id]
        return [s for s in agent.slot_ids if s not in used and s not in agent.disabled_slots
                ][:slots]

    def _send_grant(self, allocation: Allocation) -> None:
        self._notifying += 1
        asyncio.create_task(self._notify(allocation))

    def _tell_trial(self, request: SlotRequest, signal: str, message: object) -> None:
        """Signal the trial behind a request (`slots_failed`, `slots_waiting`) in the
        background; a trial that ended meanwhile is only logged."""
        self._signal(request.workflow_id, signal, message)

    def _signal(self, workflow_id: str, signal: str, message: object) -> None:
        """Signal a trial or task in the background; one that ended meanwhile is only logged."""
        self._notifying += 1

        async def send() -> None:
            try:
                await workflow.get_external_workflow_handle(workflow_id).signal(signal, message)
            except Exception as err:  # the trial ended meanwhile
                workflow.logger.warning("trial %s is gone (%s)", workflow_id, err)
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
        self._preempting.discard(allocation_id)
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
        disabled = dict(agent.disabled_slots) if agent is not None else {}
        agent = AgentState(agent_id=reg.agent_id, slot_ids=list(reg.slot_ids),
                           boot_id=reg.boot_id, enabled=enabled, address=reg.address,
                           disabled_slots=disabled)
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

    @workflow.signal(name=PoolMessages.SET_SLOT_ENABLED)
    def set_slot_enabled(self, change: SlotEnabled) -> None:
        """`det slot enable|disable`: a disabled slot keeps what runs on it and takes no new
        work. Kept for an agent not registered yet, and across its restarts."""
        if not workflow.patched(SHARED_CLUSTER_PATCH):
            return
        agent = self._agents.get(change.agent_id)
        if agent is None:
            agent = AgentState(agent_id=change.agent_id, slot_ids=[], alive=False,
                               lost_reason="not registered yet")
            self._agents[change.agent_id] = agent
        if change.enabled:
            agent.disabled_slots.pop(change.slot_id, None)
        else:
            agent.disabled_slots[change.slot_id] = change.reason
        self._dirty = True

    @workflow.signal(name=PoolMessages.MOVE_JOB)
    def move_job(self, move: MoveJob) -> None:
        """UpdateJobQueue's aheadOf|behindOf (`epochal job update`): the job takes its anchor's
        priority and the place just ahead of (or behind) it among the jobs of that priority."""
        if not workflow.patched(SHARED_CLUSTER_PATCH) or move.experiment_id == (
                move.anchor_experiment_id):
            return
        waiting: dict[int, SlotRequest] = {}
        for r in sorted(self._pending.values(), key=lambda r: r.seq):
            waiting.setdefault(r.experiment_id, r)
        anchor = waiting.get(move.anchor_experiment_id)
        if anchor is None:
            return  # the anchor holds all it asked for: nothing to be ahead of in the queue
        self.set_experiment_resources(ExperimentResources(move.experiment_id,
                                                          priority=anchor.priority))
        places = sorted(self._position(exp, first) for exp, first in waiting.items()
                        if first.priority == anchor.priority and exp != move.experiment_id)
        at = self._position(anchor.experiment_id, anchor)
        index = places.index(at)
        if move.ahead:
            before = places[index - 1] if index > 0 else at - 2
            place = (before + at) / 2
        else:
            after = places[index + 1] if index + 1 < len(places) else at + 2
            place = (at + after) / 2
        self._queue_positions[move.experiment_id] = place
        while len(self._queue_positions) > OVERRIDES_KEPT:
            del self._queue_positions[next(iter(self._queue_positions))]
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
        queue = self._queue_order()
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
                    "disabledSlots": {str(k): v for k, v in agent.disabled_slots.items()},
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
            "preempting": sorted(self._preempting),
            "queuePositions": {str(k): v for k, v in self._queue_positions.items()},
            "policy": vars(self._policy),
        }
