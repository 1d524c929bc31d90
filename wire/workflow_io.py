"""Inputs and results of Epochal's workflows and activities.

One dataclass per workflow or activity, so that fields can be added with defaults without breaking
running workflows. They travel through Temporal as JSON; keep them plain (no pydantic here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.states import EndState, ExperimentState, TaskState, TrialState

JSON = dict[str, Any]


@dataclass
class ExperimentCarry:
    """What ExperimentWorkflow carries over continue-as-new: the search and its own bookkeeping.

    It travels as the dict it was before it had a type (`to_json`: the same keys, `pending` or
    `pending_from`, `error` only when set), and the data converter reads that dict, from a run
    that continued-as-new before or after, into this (every field has a default, so a field
    added later reads from an older carry too)."""

    search: JSON | None = None  # the searcher's snapshot
    state: ExperimentState = ExperimentState.ACTIVE
    paused: bool = False
    stop: str | None = None  # TrialMessages.CANCEL or KILL once asked to stop
    # The trials the search created that have not started: as Create operations (request_id,
    # hparams, target, decision), or, since COMPACT_CARRY_PATCH, when they are exactly the rest
    # of a fixed search's list, as the first one's request id (regenerated from the seed).
    pending: list[JSON] = field(default_factory=list)
    pending_from: int | None = None
    running: dict[int, int] = field(default_factory=dict)  # trial id: request id
    trial_of: dict[int, int] = field(default_factory=dict)  # request id: trial id
    counts: dict[str, int] = field(default_factory=dict)  # ended trials by EndState
    seen: dict[int, int] = field(default_factory=dict)  # trial id: last validation length
    error: str | None = None  # the sampler failed: no more trials

    def to_json(self) -> JSON:
        """The form it travels in, key for key the dict ExperimentWorkflow carried before."""
        return {
            "search": self.search,
            "state": self.state,
            "paused": self.paused,
            "stop": self.stop,
            **({"pending_from": self.pending_from} if self.pending_from is not None
               else {"pending": self.pending}),
            "running": {str(k): v for k, v in self.running.items()},
            "trial_of": {str(k): v for k, v in self.trial_of.items()},
            "counts": self.counts,
            "seen": {str(k): v for k, v in self.seen.items()},
            **({"error": self.error} if self.error is not None else {}),
        }


@dataclass
class ExperimentInput:
    experiment_id: int
    config: JSON  # the normalized experiment config (ExperimentConfig.model_dump(mode="json"))
    seed: int
    # Carried over continue-as-new: written as `ExperimentCarry.to_json()`, read as an
    # ExperimentCarry (the converter tries the types in order; a dict is one).
    carried: ExperimentCarry | JSON | None = None
    # Continue-as-new after this many history events (0: when the server suggests it).
    max_history_events: int = 0
    # EPOCHAL_AGENT_TIMEOUT_SECONDS (common/agent_timeout.py), passed to its trials; None: their
    # default.
    agent_timeout_seconds: float | None = None


@dataclass
class TrialInput:
    experiment_id: int
    trial_id: int
    request_id: int
    hparams: JSON
    config: JSON
    trial_seed: int
    start_paused: bool = False
    # The length the first run trains to (None: the searcher's max_length, if any), in
    # `length_unit`.
    target: int | None = None
    length_unit: str = "batches"
    # Classic ASHA: after reaching `target` the trial waits for a promotion or a stop.
    waits_at_target: bool = False
    # Which guarded changes of the trial workflow apply (TRIAL_REVISION): its experiment decides
    # from its own `workflow.patched` when it starts the trial. The input is in the trial's
    # history, so a replay decides the same; and a patch marker in every trial would also write
    # a search attribute (TemporalChangeVersion) to Temporal's visibility store per trial.
    revision: int = 0
    # A run's heartbeat timeout (common/agent_timeout.py); None: RUN_HEARTBEAT_TIMEOUT.
    agent_timeout_seconds: float | None = None


# 1: the trial's database activities run locally, and so do its messages to its pool (the
# `request_slots` update, the `release` signal) and to its experiment (`report_trial_closed`):
# a message a workflow sends by signal costs both workflows a workflow task, one sent by an
# activity through the master's client costs the sender nothing more. A trial's history went
# from 57 events (10 workflow tasks, 6 activities) to 19 (2 workflow tasks, 1 activity). Its
# experiment started it through the master's client too (`start_trial`), not as a child
# workflow, until revision 2.
LOCAL_CALLS_REVISION = 1
# 2: the trial is its experiment's child workflow again (Temporal's UI shows the relation), it
# ends in Temporal's status that matches its state (ERROR Failed, CANCELED Canceled:
# workflows/temporal_status.py), a cancel request (Temporal's UI) stops it as the user's
# cancel does, and one started with Epochal's search attributes keeps `EpochalState` current.
TEMPORAL_STATUS_REVISION = 2
# 3: each run_trial carries the run's RunSpec (wire/run_spec.py), built by the trial once; the
# experiment decides it (one patch marker per experiment run), so a trial's history keeps its
# 19 events. A trial of revision 2 decides it with a marker of its own (workflows/trial.py).
RUN_SPEC_REVISION = 3
TRIAL_REVISION = RUN_SPEC_REVISION  # what a trial started now gets


@dataclass
class StartTrialInput:
    """Activity `start_trial`: start the trial's workflow (once: a retry finds it started).
    A trial workflow of that id that started before `not_before` (the experiment run's start,
    epoch seconds) is the trial's previous life, in an experiment since continued: the trial
    starts anew."""

    workflow_id: str
    trial: TrialInput
    not_before: float = 0.0


@dataclass
class CancelRequestInput:
    """Activity `request_cancel`: the master's client asks Temporal to cancel the workflow run
    (a workflow cannot ask it of itself by command), so that it ends Canceled."""

    workflow_id: str
    run_id: str
    reason: str


@dataclass
class SampleHparamsInput:
    """Activity `sample_trial_hparams`: the hyperparameters of the experiment's trial
    `request_id`, drawn by its searcher's sampler from what its trials reported so far."""

    experiment_id: int
    request_id: int
    experiment_seed: int


@dataclass
class TrialOutcome:
    """What a finished trial reports to its experiment (by signal, so it survives the
    experiment continuing-as-new)."""

    trial_id: int
    state: EndState
    restarts: int = 0
    early_exit_reason: str | None = None
    stopped_early: bool = False
    error: str | None = None


@dataclass
class TrialClosedInput:
    """Activity `report_trial_closed`: tell the experiment its trial ended."""

    experiment_id: int
    outcome: TrialOutcome


@dataclass
class ValidationReport:
    """A validation of the searcher metric at one of the searcher's decision points (from the
    API to the experiment)."""

    trial_id: int
    length: int
    metric: float


@dataclass
class RecordSearchInput:
    """Where a trial stands in the search, for people (rung, status) and for the API's gate
    (`search_length`: the next validation length the searcher wants to hear about)."""

    trial_id: int
    search_length: int | None
    rung: int | None
    status: str


@dataclass
class CheckSearcherMetricInput:
    trial_id: int
    metric: str
    min_length: int = 0
    time_metric: str | None = None


@dataclass
class TrialLogInput:
    """A line the master writes into a trial's logs (restarts, errors it decided)."""

    trial_id: int
    task_id: str
    log: str
    level: str = "INFO"
    allocation_id: str | None = None
    agent_id: str | None = None


@dataclass
class CreateTrialInput:
    experiment_id: int
    request_id: int
    hparams: JSON
    trial_seed: int
    search_length: int | None = None


@dataclass
class RecordExperimentStateInput:
    experiment_id: int
    state: ExperimentState
    ended: bool = False


@dataclass
class RecordTrialStateInput:
    trial_id: int
    state: TrialState
    restarts: int | None = None
    run_id: int | None = None
    ended: bool = False
    agent_id: str | None = None
    search_status: str | None = None  # replaces the trial's search status when given
    # A run on several agents: every agent, the chief first (for the allocation history).
    agent_ids: list[str] | None = None


@dataclass
class RequestPreemptionInput:
    trial_id: int
    preempt: bool


@dataclass
class ResumePoint:
    latest_checkpoint: str | None
    steps_completed: int
    early_exit_reason: str | None = None


@dataclass
class FinishExperimentInput:
    experiment_id: int
    state: ExperimentState
    error: str | None = None  # why it is ERROR when its trials do not say (the sampler failed)


RENDEZVOUS_PORTS = 3  # free ports a run's chief offers: torch's c10d, then the harnesses' two


@dataclass
class Rendezvous:
    """How the parts of a run on several agents find each other (one part per agent)."""

    container_addrs: list[str]  # every part's agent address, the chief's first
    container_rank: int  # this part's index in container_addrs
    container_slot_counts: list[int]
    # Free ports on the chief: torch's rendezvous (c10d), then two for the harnesses' own
    # messages (Determined's INTER_TRAIN_PROCESS_COMM_PORT_1 and _2).
    ports: list[int]


@dataclass
class RunTrialInput:
    """Everything an agent needs to run one trial process (one run of a trial)."""

    experiment_id: int
    trial_id: int
    run_id: int
    hparams: JSON
    # The stored experiment config: what agents before RunSpec read, and what the spec of a
    # run scheduled without one is built from (wire/run_spec.py's `trial_run_spec`).
    config: JSON
    trial_seed: int
    latest_checkpoint: str | None
    steps_completed: int
    master_url: str = ""  # empty: the agent uses the master URL it was started with
    session_token: str | None = None
    # {unit: N} this run trains to; None: the searcher's max_length (none: the code decides).
    max_length: JSON | None = None
    slot_ids: list[int] | None = None  # the agent's slots the scheduler granted this run
    rendezvous: Rendezvous | None = None  # a run on several agents; None: on one
    # The run as the agent runs it: wire/run_spec.py's RunSpec, as JSON (None: scheduled by a
    # workflow from before RunSpec).
    spec: JSON | None = None


@dataclass
class RunTrialResult:
    exit_code: int
    agent_id: str
    oom_killed: bool = False
    message: str = ""
    extra: JSON = field(default_factory=dict)


# Interactive tasks (commands, notebooks, shells, TensorBoards): workflows/task.py.

TASK_TYPES = ("COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD")


@dataclass
class TaskInput:
    """TaskWorkflow's input. The task's row (config, files, secrets) stays in the database: the
    agent fetches its launch from the master, so no credential is written in a history."""

    task_id: str
    task_type: str  # one of TASK_TYPES
    resource_pool: str
    slots: int
    priority: int | None = None
    # Stop the task after this long without a request through the proxy (None: never).
    idle_timeout_seconds: float | None = None
    # Its run's heartbeat timeout (common/agent_timeout.py); None: RUN_HEARTBEAT_TIMEOUT.
    agent_timeout_seconds: float | None = None


@dataclass
class RunTaskInput:
    """The agent's `run_task` activity: run the task on these slots until it ends. Its config
    is not sent: the agent fetches the task's launch from the master and builds the task's
    RunSpec from it (wire/run_spec.py's `task_run_spec`)."""

    task_id: str
    task_type: str
    slot_ids: list[int]
    master_url: str = ""  # empty: the agent uses the master URL it was started with


@dataclass
class RunTaskResult:
    exit_code: int
    agent_id: str
    message: str = ""


@dataclass
class RecordTaskStateInput:
    task_id: str
    state: TaskState
    agent_id: str | None = None
    exit_status: str | None = None
