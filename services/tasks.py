"""Interactive tasks (commands, notebooks, shells, TensorBoards): a launch's config checked
(a template's task fields merged under it, bind mounts only from the cluster's roots), its row
stored and its TaskWorkflow (workflows/task.py) started, the row deleted if Temporal refuses; a
kill told to its workflow, or recorded here when the workflow is gone (activities/task_store.py
writes task states)."""

from __future__ import annotations

import logging
import secrets
from typing import Any

import asyncpg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.task_store import TaskStore
from common.agent_timeout import agent_timeout_seconds
from common.checkpoint_storage import under_any_root
from common.expconf import ConfigError, TaskConfig, TaskResourcesConfig, validate_task_config
from common.search_attributes import task_attributes
from common.states import TaskState
from common.temporal_names import MASTER_TASK_QUEUE, TASK_WORKFLOW, TaskMessages, task_workflow_id
from services import pool_bindings
from services.errors import Invalid, Unavailable
from wire.workflow_io import RecordTaskStateInput, TaskInput

log = logging.getLogger(__name__)


def template_part(template: dict[str, Any], task_type: str) -> dict[str, Any]:
    """What of a config template applies to a task: Determined's task config takes the fields
    it has (an experiment's template holds a searcher and the like)."""
    part = {k: v for k, v in template.items() if k in TaskConfig.model_fields}
    if task_type != "COMMAND":
        part.pop("entrypoint", None)
    resources = part.get("resources")
    if isinstance(resources, dict):
        part["resources"] = {k: v for k, v in resources.items()
                             if k in TaskResourcesConfig.model_fields and k != "slots_per_trial"}
    return part


def normalized_task_config(data: Any, task_type: str, what: str,
                           roots: tuple[str, ...]) -> dict[str, Any]:
    """The task's config validated and normalized; bind mounts only from the directories the
    cluster lets tasks mount (a task runs as the agent's user: a mount of its home or the
    cluster's state would hand the task their secrets). `what` names the task in errors."""
    try:
        config = validate_task_config(data, task_type)
    except ConfigError as err:
        raise Invalid(f"invalid {what} config", list(err.errors)) from err
    outside = [f"bind_mounts[{i}].host_path: {mount.host_path} is outside the directories this"
               f" cluster lets tasks mount ({', '.join(roots)}); an admin can allow more with"
               " EPOCHAL_STORAGE_ROOTS"
               for i, mount in enumerate(config.bind_mounts)
               if not under_any_root(mount.host_path, roots)]
    if outside:
        raise Invalid(f"invalid {what} config", outside)
    return config.model_dump(mode="json")


async def place_task(conn: asyncpg.Pool | asyncpg.Connection, config: dict[str, Any],
                     given: Any, workspace_id: int) -> None:
    """Set the normalized task config's pool: the one the config as given (`given`, before
    defaults) names, else the workspace's default pool (its aux pool for a task of 0 slots);
    refused when the pool is bound to other workspaces only."""
    resources = given.get("resources") if isinstance(given, dict) else None
    named = resources.get("resource_pool") if isinstance(resources, dict) else None
    config["resources"]["resource_pool"] = await pool_bindings.resolve_pool(
        conn, workspace_id, named if isinstance(named, str) and named else None,
        config["resources"]["slots"])


def shell_keys() -> tuple[str, str]:
    """A shell's key pair: the public key its sshd admits, and the private key in OpenSSH's
    PEM, as Determined's `privateKey` (which `det shell open` hands to ssh)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH)
    return public.decode(), private.decode()


async def insert_task(conn: asyncpg.Pool | asyncpg.Connection, *, task_id: str, task_type: str,
                      owner_id: int, workspace_id: int, description: str,
                      config: dict[str, Any], context: bytes | None, resource_pool: str,
                      slots: int, priority: int | None, secret: str, public_key: str | None,
                      private_key: str | None, experiment_ids: list[int],
                      trial_ids: list[int]) -> None:
    await conn.execute(
        "INSERT INTO tasks (id, task_type, owner_id, workspace_id, description, config,"
        " context, resource_pool, slots, priority, secret, public_key, private_key,"
        " experiment_ids, trial_ids)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
        task_id, task_type, owner_id, workspace_id, description, config, context,
        resource_pool, slots, priority, secret, public_key, private_key, experiment_ids,
        trial_ids)


async def launch(
    pool: asyncpg.Pool, temporal: Client, *, task_id: str, task_type: str, what: str,
    owner_id: int, owner: str, workspace_id: int, config: dict[str, Any],
    context: bytes | None, keys: tuple[str, str] | None, experiment_ids: list[int],
    trial_ids: list[int], findable: bool,
) -> None:
    """Store the task's row (a new secret for its service, a shell's `keys`), then start its
    workflow; if Temporal refuses, the row is deleted (Unavailable)."""
    resources = config["resources"]
    public_key, private_key = keys if keys is not None else (None, None)
    await insert_task(
        pool, task_id=task_id, task_type=task_type, owner_id=owner_id,
        workspace_id=workspace_id, description=config["description"], config=config,
        context=context, resource_pool=resources["resource_pool"], slots=resources["slots"],
        priority=resources["priority"], secret=secrets.token_urlsafe(32), public_key=public_key,
        private_key=private_key, experiment_ids=experiment_ids, trial_ids=trial_ids)
    try:
        await temporal.start_workflow(
            TASK_WORKFLOW,
            TaskInput(task_id=task_id, task_type=task_type,
                      resource_pool=resources["resource_pool"], slots=resources["slots"],
                      priority=resources["priority"], idle_timeout_seconds=config["idle_timeout"],
                      agent_timeout_seconds=agent_timeout_seconds()),
            id=task_workflow_id(task_id), task_queue=MASTER_TASK_QUEUE,
            search_attributes=task_attributes(owner, config["description"])
            if findable else None)
    except BaseException as err:
        # A task whose workflow could not be started is not kept.
        await pool.execute("DELETE FROM tasks WHERE id = $1", task_id)
        if isinstance(err, RPCError):
            raise Unavailable(f"cannot start the {what}: {err.message}") from err
        raise


async def tell_task_running(temporal: Client, task_id: str) -> None:
    """The task's workflow shows RUNNING in Temporal too (`EpochalState`); the row is what
    counts, so a workflow that cannot take it (ended meanwhile) is no error."""
    try:
        await temporal.get_workflow_handle(task_workflow_id(task_id)).signal(
            TaskMessages.RUNNING)
    except RPCError as err:
        log.info("task %s's workflow did not take %s: %s", task_id, TaskMessages.RUNNING,
                 err.message)


async def kill_task(pool: asyncpg.Pool, temporal: Client, task_id: str) -> None:
    """Tell the task's workflow to stop it; a task whose workflow is gone is over already, so
    its row says so."""
    handle = temporal.get_workflow_handle(task_workflow_id(task_id))
    try:
        await handle.signal(TaskMessages.KILL)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise Unavailable(f"cannot reach task {task_id}'s workflow: {err.message}") from err
        await TaskStore(pool).record_task_state(RecordTaskStateInput(
            task_id=task_id, state=TaskState.TERMINATED, exit_status="killed"))
