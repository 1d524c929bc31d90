"""Messages and state of the resource-pool scheduler (`ResourcePoolWorkflow`).

Plain dataclasses that travel through Temporal as JSON; add fields only with defaults, since
running pools carry their state forward through continue-as-new.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.states import AllocationState

DEFAULT_PRIORITY = 42  # Determined's convention: lower numbers run first


@dataclass
class AgentRegistration:
    """Signal `register_agent`: an agent (re)joined the pool with these slots."""

    agent_id: str
    slot_ids: list[int]
    boot_id: str  # new on every agent start; a stale `agent_lost` for an older boot is ignored
    enabled: bool = True
    address: str = ""  # where the agent's trials are reached by their peers (rendezvous)


@dataclass
class AgentLost:
    """Signal `agent_lost` (also raised inside the pool when the liveness activity ends)."""

    agent_id: str
    boot_id: str
    reason: str = "lost"


@dataclass
class AgentEnabled:
    """Signal `set_agent_enabled`: a disabled agent finishes its runs and gets no new ones."""

    agent_id: str
    enabled: bool


@dataclass
class SlotRequest:
    """Update `request_slots`: a trial run wants `slots` slots. Deduplicated on allocation_id."""

    allocation_id: str  # "<experiment>.<trial>.<run>"
    workflow_id: str  # the trial workflow, told by signal `slots_granted` if it had to wait
    experiment_id: int
    trial_id: int
    slots: int = 1
    priority: int = DEFAULT_PRIORITY
    max_slots: int | None = None  # the experiment's resources.max_slots
    requested_at: str = ""  # set by the pool (RFC 3339)
    seq: int = 0  # set by the pool: arrival order
    # Filled in by the master's `request_slots` activity from the database (None: unknown, as
    # in requests made before they existed): fair share across workspaces and users, and the
    # workspace's slot cap.
    user_id: int | None = None
    workspace_id: int | None = None
    workspace_max_slots: int | None = None
    task: bool = False  # an interactive task (not a trial): preempted only if the pool says so


@dataclass
class ExperimentResources:
    """Signal `set_experiment_resources` (`det experiment set priority|max-slots|weight`): applies
    to the experiment's waiting requests and to every later one. None leaves a value as it was."""

    experiment_id: int
    priority: int | None = None
    max_slots: int | None = None
    weight: float | None = None  # scales its fair share among experiments of equal priority


@dataclass
class SlotEnabled:
    """Signal `set_slot_enabled` (`det slot enable|disable`): a disabled slot finishes what runs
    on it and is given no new work; `reason` is shown in `det slot list`."""

    agent_id: str
    slot_id: int
    enabled: bool
    reason: str = ""


@dataclass
class MoveJob:
    """Signal `move_job` (UpdateJobQueue's aheadOf|behindOf: `epochal job update`, Determined's
    web UI): experiment `experiment_id`'s waiting requests go just ahead of (or behind) those of
    `anchor_experiment_id`, taking its priority."""

    experiment_id: int
    anchor_experiment_id: int
    ahead: bool = True


@dataclass
class PoolMove:
    """Signal `move_to_pool` to an experiment and on to its trials (UpdateJobQueue's
    resourcePool: `det job update --resource-pool`): its requests go to pool `pool` from now
    on; one waiting in the old pool is withdrawn and made there."""

    pool: str


@dataclass
class Preemption:
    """Signal `preempt` to a trial (or task): the pool needs its slots for higher-priority work.
    The trial asks its code to checkpoint and stop, gives the slots back and queues again; past
    `grace_seconds` the run is killed."""

    allocation_id: str
    reason: str
    grace_seconds: float = 3600.0


@dataclass
class ReopenTrial:
    """Signal `reopen_trial`: a continued trial (`det experiment continue`) numbers its runs
    from 1 again, so the pool forgets that its earlier allocations were released."""

    experiment_id: int
    trial_id: int


@dataclass
class AllocationPart:
    """One agent's share of an allocation: a trial on several agents runs one part on each."""

    agent_id: str
    task_queue: str
    slot_ids: list[int]
    address: str = ""


@dataclass
class Allocation:
    """Slots granted to one run. `agent_id`, `task_queue` and `slot_ids` are the chief's part;
    `parts` lists every agent's, the chief first (empty in allocations granted before trials
    could span agents: then the chief's is the only part; see `allocation_parts`)."""

    allocation_id: str
    agent_id: str
    task_queue: str  # agent.<agentId>: where the run activity goes
    slot_ids: list[int]
    experiment_id: int
    trial_id: int
    slots: int
    priority: int = DEFAULT_PRIORITY
    workflow_id: str = ""
    requested_at: str = ""
    granted_at: str = ""
    parts: list[AllocationPart] = field(default_factory=list)
    user_id: int | None = None
    workspace_id: int | None = None
    task: bool = False


def allocation_parts(allocation: Allocation) -> list[AllocationPart]:
    """Every agent's part of an allocation, the chief first."""
    if allocation.parts:
        return list(allocation.parts)
    return [AllocationPart(agent_id=allocation.agent_id, task_queue=allocation.task_queue,
                           slot_ids=list(allocation.slot_ids))]


@dataclass
class SlotWaiting:
    """Signal `slots_waiting` to a trial: its request is larger than the pool as it is now, so
    it waits (without holding up smaller requests) until agents join."""

    allocation_id: str
    message: str


@dataclass
class SlotReply:
    """The answer to `request_slots`: granted now, or queued (a signal follows when granted)."""

    status: AllocationState
    allocation: Allocation | None = None
    position: int = 0  # place in the queue when queued (0-based)


@dataclass
class SlotFailure:
    """Signal `slots_failed` to a trial: its request can never be granted."""

    allocation_id: str
    message: str


@dataclass
class SlotRelease:
    """Update `release_slots`: the run ended (or the trial gave up waiting). Idempotent."""

    allocation_id: str


@dataclass
class AgentState:
    agent_id: str
    slot_ids: list[int]
    boot_id: str = ""
    enabled: bool = True
    alive: bool = True
    lost_reason: str = ""
    address: str = ""
    disabled_slots: dict[int, str] = field(default_factory=dict)  # slot id -> reason


@dataclass
class PoolState:
    """Everything the pool carries into its next run on continue-as-new."""

    agents: list[AgentState] = field(default_factory=list)
    pending: list[SlotRequest] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # recent allocation ids, for dedup
    seq: int = 0
    generation: int = 0  # how many times the pool continued as new
    overrides: list[ExperimentResources] = field(default_factory=list)
    told_waiting: list[str] = field(default_factory=list)  # requests told they wait for agents
    preempting: list[str] = field(default_factory=list)  # allocations told to give slots back
    queue_positions: dict[int, float] = field(default_factory=dict)  # experiment -> moved place
    head_agents: list[str] = field(default_factory=list)  # agents the head request keeps


@dataclass
class PoolPolicy:
    """How a pool schedules (Determined's `resource_pools[].scheduler` of type `priority`)."""

    # A request that cannot be placed takes strictly lower-priority work's slots (off, as
    # Determined's priority scheduler by default).
    preemption: bool = False
    backfill: bool = True  # requests behind one that does not fit use the slots it cannot
    # Then a preempted run that has not stopped is killed (Determined's default: an hour).
    preemption_timeout_seconds: float = 3600.0
    preempt_tasks: bool = False  # interactive tasks are preempted too


@dataclass
class PoolInput:
    name: str
    state: PoolState | None = None
    # Continue-as-new once the history is this long (tests); None: when the server suggests it.
    max_history_length: int | None = None
    # How long an agent may miss heartbeats before it is lost; None: the default (15 s).
    liveness_timeout_seconds: float | None = None
    # The pool's scheduling policy (EPOCHAL_MASTER_CONFIG's `scheduler`); None: the default.
    policy: PoolPolicy | None = None


@dataclass
class AgentLivenessInput:
    agent_id: str
    boot_id: str
    pool: str


@dataclass
class RequestSlotsInput:
    """Activity `request_slots`: ask pool `pool` (started if need be) for slots."""

    pool: str
    request: SlotRequest
    master_task_queue: str = "epochal-master"


@dataclass
class ReleaseSlotsInput:
    pool: str
    allocation_id: str
