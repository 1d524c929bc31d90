"""Names shared by the master, the agents and the API: task queues, workflow ids and types,
activities, signals, queries and updates. Handlers are declared with these (`name=`) and
callers use them, so a name is written once.

They are stored in Temporal histories, so changing one breaks running workflows.
"""

import re

MASTER_TASK_QUEUE = "epochal-master"
DEFAULT_NAMESPACE = "default"
DEFAULT_RESOURCE_POOL = "default"

# The agent's activities, scheduled by the trial and pool workflows on the agent's own queue.
RUN_TRIAL = "run_trial"
AGENT_LIVENESS = "agent_liveness"
RESERVE_PORTS = "reserve_ports"  # free ports on the chief agent of a run on several agents
RUN_TASK = "run_task"  # an interactive task (command, notebook, shell, TensorBoard), to its end


def pool_task_queue(pool: str) -> str:
    """Task queue every agent of a resource pool polls for trial runs."""
    return f"epochal-pool-{pool}"


def agent_task_queue(agent_id: str) -> str:
    """Task queue only one agent polls: the runs the scheduler placed on it, and its liveness."""
    return f"agent.{agent_id}"


def experiment_workflow_id(experiment_id: int) -> str:
    return f"experiment-{experiment_id}"


def trial_workflow_id(experiment_id: int, trial_id: int) -> str:
    return f"experiment-{experiment_id}-trial-{trial_id}"


def task_id(experiment_id: int, trial_id: int) -> str:
    return f"{experiment_id}.{trial_id}"


def allocation_id(experiment_id: int, trial_id: int, run_id: int) -> str:
    return f"{experiment_id}.{trial_id}.{run_id}"


def task_workflow_id(task_id: str) -> str:
    """The workflow of an interactive task (a command, notebook, shell or TensorBoard)."""
    return f"task-{task_id}"


_TASK_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def is_task_uuid(value: str) -> bool:
    """An interactive task's whole id (a UUID, as Determined's), not a trial's `EXP.TRIAL` nor
    a prefix."""
    return _TASK_UUID.match(value) is not None


def task_allocation_id(task_id: str) -> str:
    """An interactive task runs once: its one allocation, as Determined names them."""
    return f"{task_id}.1"


def resource_pool_workflow_id(pool: str) -> str:
    """The one scheduler workflow of a resource pool (started by the master at boot)."""
    return f"resource-pool-{pool}"


# The provisioner's activities (activities/provisioning.py), on the master's queue.
PROVISIONER_OBSERVE = "provisioner_observe"
PROVISIONER_LAUNCH = "provisioner_launch"
PROVISIONER_TERMINATE = "provisioner_terminate"
PROVISIONER_SET_ENABLED = "provisioner_set_enabled"


def provisioner_workflow_id(pool: str) -> str:
    """The one provisioner of a resource pool with a provider (started by the master at boot)."""
    return f"provisioner-{pool}"


# Workflow types (the names their histories are stored under).
EXPERIMENT_WORKFLOW = "ExperimentWorkflow"
TRIAL_WORKFLOW = "TrialWorkflow"
RESOURCE_POOL_WORKFLOW = "ResourcePoolWorkflow"
PROVISIONER_WORKFLOW = "ProvisionerWorkflow"
TASK_WORKFLOW = "TaskWorkflow"

# The master's activities (activities/experiment_store.py, activities/scheduler.py), on the
# master's queue; workflows call them through workflows/db_activities.py.
CREATE_TRIAL = "create_trial"
RECORD_SEARCH = "record_search"
CHECK_SEARCHER_METRIC = "check_searcher_metric"
WRITE_TRIAL_LOG = "write_trial_log"
RECORD_EXPERIMENT_STATE = "record_experiment_state"
RECORD_TRIAL_STATE = "record_trial_state"
REQUEST_PREEMPTION = "request_preemption"
GET_RESUME_POINT = "get_resume_point"
FINISH_EXPERIMENT = "finish_experiment"
REQUEST_SLOTS_ACTIVITY = "request_slots"  # asks the pool's update of the same name
RELEASE_SLOTS_ACTIVITY = "release_slots"
REPORT_TRIAL_CLOSED = "report_trial_closed"  # signals the experiment through the master's client
START_TRIAL = "start_trial"  # starts a trial's workflow through the master's client
REQUEST_CANCEL = "request_cancel"  # a workflow's own run canceled, through the master's client
SAMPLE_TRIAL_HPARAMS = "sample_trial_hparams"  # a sampler's draw (activities/model_sampling.py)
RECORD_TASK_STATE = "record_task_state"  # an interactive task's state (activities/task_store.py)
TASK_IDLE_SECONDS = "task_idle_seconds"  # how long since its proxy last carried a request


class ExperimentMessages:
    """ExperimentWorkflow's signals, update and query."""

    # From the API, a validation at a rung whose report waits for the searcher's decision
    # (update): the one protocol for a validation.
    DECIDE_VALIDATION = "decide_validation"
    # The old protocol (signal, no answer): kept for histories that hold it (its handler says
    # until when).
    VALIDATION_REPORTED = "validation_reported"
    TRIAL_CLOSED = "trial_closed"  # from each of its trials when it ends
    PAUSE = "pause"  # from the API, the user's: passed on to the trials
    ACTIVATE = "activate"
    CANCEL = "cancel"
    KILL = "kill"
    MOVE_TO_POOL = "move_to_pool"  # from the API (`det job update --resource-pool`): to trials
    DESCRIBE = "describe"  # query


class TrialMessages:
    """TrialWorkflow's signals and query."""

    STOP_EARLY = "stop_early"  # from its experiment's searcher
    CONTINUE_TO = "continue_to"
    SLOTS_GRANTED = "slots_granted"  # from its pool
    SLOTS_FAILED = "slots_failed"
    SLOTS_WAITING = "slots_waiting"
    PAUSE = "pause"  # from its experiment (the user's), or the API for one trial's kill
    ACTIVATE = "activate"
    CANCEL = "cancel"
    KILL = "kill"
    PREEMPT = "preempt"  # from its pool: checkpoint, give the slots back, queue again
    MOVE_TO_POOL = ExperimentMessages.MOVE_TO_POOL  # from its experiment: ask another pool
    DESCRIBE = "describe"  # query


class TaskMessages:
    """TaskWorkflow's signals: the pool's answers (named as a trial's), the user's kill, and
    the task running."""

    SLOTS_GRANTED = TrialMessages.SLOTS_GRANTED
    SLOTS_FAILED = TrialMessages.SLOTS_FAILED
    SLOTS_WAITING = TrialMessages.SLOTS_WAITING
    PREEMPT = TrialMessages.PREEMPT  # from its pool, only where the pool preempts tasks
    KILL = "kill"  # from the API (`det cmd kill`, the dashboard)
    RUNNING = "running"  # from the API: the agent said the task's service answers


class PoolMessages:
    """ResourcePoolWorkflow's signals, updates and queries."""

    REGISTER_AGENT = "register_agent"  # from the API when an agent registers
    AGENT_LOST = "agent_lost"
    SET_AGENT_ENABLED = "set_agent_enabled"  # from the API and the provisioner
    SET_SLOT_ENABLED = "set_slot_enabled"  # from the API (`det slot enable|disable`)
    MOVE_JOB = "move_job"  # from the API (UpdateJobQueue's aheadOf|behindOf)
    SET_EXPERIMENT_RESOURCES = "set_experiment_resources"
    REOPEN_TRIAL = "reopen_trial"
    REQUEST_SLOTS = "request_slots"  # update, from the activity of that name: slots for a run
    RELEASE = "release"  # slots given back (from the activity `release_slots`)
    # The old protocols, kept for what was started before (their handlers say until when):
    REQUEST = "request"  # signal, from trials of revision 0
    RELEASE_SLOTS = "release_slots"  # update, which the activity sent before `release`
    CHECK_REQUEST = "check_request"  # query: would a request ever fit
    DESCRIBE = "describe"  # query
