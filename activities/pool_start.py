"""The one place a resource pool's scheduler (`ResourcePoolWorkflow`) is started.

Several parts of the master may find a pool not running yet: its boot (the pools it is
configured with), the API's signals to a pool (an agent's registration or drain, an experiment's
weight, a continued trial), and a trial's first slot request (a pool its config names). Each
starts it here, so the workflow id, input, queue and the rule "use the one that runs" are
written once.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy

from common.agent_timeout import agent_timeout_seconds, liveness_timeout_seconds
from common.temporal_names import (
    MASTER_TASK_QUEUE,
    RESOURCE_POOL_WORKFLOW,
    resource_pool_workflow_id,
)
from providers.config import MASTER_CONFIG_ENV, PoolPolicies, load_pool_policies
from wire.pools import PoolInput


@functools.cache
def _policies(path: str) -> PoolPolicies:
    return load_pool_policies(path)


def _pool_input(name: str) -> PoolInput:
    """The pool's input, with the agent timeout this master runs with (common/agent_timeout.py)
    and its scheduler's policy from EPOCHAL_MASTER_CONFIG (None: the defaults, and an input as
    before policies existed)."""
    return PoolInput(name=name,
                     liveness_timeout_seconds=liveness_timeout_seconds(agent_timeout_seconds()),
                     policy=_policies(os.environ.get(MASTER_CONFIG_ENV, "")).of(name))


async def start_pool(client: Client, name: str) -> None:
    """Start the pool's scheduler unless it runs already."""
    await client.start_workflow(
        RESOURCE_POOL_WORKFLOW, _pool_input(name), id=resource_pool_workflow_id(name),
        task_queue=MASTER_TASK_QUEUE, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)


async def signal_pool(client: Client, name: str, signal: str, arg: object) -> None:
    """Signal the pool's scheduler, starting it if it does not run yet."""
    await client.start_workflow(
        RESOURCE_POOL_WORKFLOW, _pool_input(name), id=resource_pool_workflow_id(name),
        task_queue=MASTER_TASK_QUEUE, start_signal=signal, start_signal_args=[arg])


def pool_start_operation(
    name: str, task_queue: str = MASTER_TASK_QUEUE
) -> WithStartWorkflowOperation[Any, Any]:
    """The start half of an update-with-start to the pool (its update runs once it does)."""
    return WithStartWorkflowOperation(
        RESOURCE_POOL_WORKFLOW, _pool_input(name), id=resource_pool_workflow_id(name),
        task_queue=task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)
