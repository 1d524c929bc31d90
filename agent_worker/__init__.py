"""The Epochal agent: one process per compute node that runs trials for its resource pool.

It registers its slots with the master, polls its pool's and its own Temporal task queues for
the `run_trial` activity, and runs each trial with a `Runtime`: a process group on the host
(`ProcessRuntime`, the default) or a task container (`DockerRuntime`, `--runtime docker`).
"""

from agent_worker.main import Agent, AgentConfig, main
from agent_worker.process_runtime import ProcessRuntime
from agent_worker.runtime import ExitStatus, Launch, Runtime
from agent_worker.trial_runs import AgentActivities

__all__ = [
    "Agent",
    "AgentActivities",
    "AgentConfig",
    "ExitStatus",
    "ProcessRuntime",
    "Runtime",
    "Launch",
    "main",
]
