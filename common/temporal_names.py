"""Names shared by the master, the agents and the API: task queues, workflow ids, signals.

They are stored in Temporal histories, so changing one breaks running workflows.
"""

MASTER_TASK_QUEUE = "epochal-master"
DEFAULT_NAMESPACE = "default"
DEFAULT_RESOURCE_POOL = "default"

# The agent's activities, scheduled by the trial and pool workflows on the agent's own queue.
RUN_TRIAL = "run_trial"
AGENT_LIVENESS = "agent_liveness"
RESERVE_PORTS = "reserve_ports"  # free ports on the chief agent of a run on several agents


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
