"""An experiment's submission: its config normalised once (templates merged under it, defaults
filled in, the cluster's storage and mount policy checked), its rows and model definition stored
together, and its workflow started once they are committed; if Temporal refuses, the rows go.
A continued experiment (`det experiment continue`) is submitted again under its own ids, and a
detached (unmanaged) one is stored only: no workflow runs it."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import yaml
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError

from activities.model_sampling import sampler_problem
from common import payload_codec
from common.agent_timeout import agent_timeout_seconds
from common.checkpoint_storage import (
    CheckpointFiles,
    StorageError,
    shared_fs_directory,
    under_any_root,
)
from common.expconf import (
    ConfigError,
    ExperimentConfig,
    load_config_yaml,
    parse_experiment_data,
    planned_trials,
)
from common.search_attributes import experiment_attributes, experiment_memo
from common.states import ExperimentState, TrialState
from common.temporal_names import (
    EXPERIMENT_WORKFLOW,
    MASTER_TASK_QUEUE,
    PoolMessages,
    experiment_workflow_id,
)
from services import pool_bindings, pools
from services.errors import Conflict, Invalid, Unavailable
from services.settings import StorageSettings
from services.templates import merge_under, template_config
from services.workspaces import resolve_project
from wire.pools import ExperimentResources, ReopenTrial
from wire.workflow_io import ExperimentInput

# What a detached run's config is validated with in place of the entrypoint it has not got (the
# script runs outside the cluster); the stored config has none.
_NO_ENTRYPOINT = "true"


@dataclass(frozen=True)
class CheckedConfig:
    """A submitted config, validated once: the model, and its normalised dump as it is stored
    and handed to the workflow (defaults filled in; a detached run's without an entrypoint)."""

    model: ExperimentConfig
    data: dict[str, Any]


def _unmanaged_config(data: dict[str, Any]) -> dict[str, Any]:
    """A detached script's config as it is validated: the placeholder entrypoint, and its
    `directory` storage (core_v2's default: a directory of the script's host, which the script
    writes) as shared_fs storage at that path. The master reads and deletes only inside the
    cluster's roots (common/checkpoint_storage.py): elsewhere the files stay the script's."""
    data = {**data, "entrypoint": data.get("entrypoint") or _NO_ENTRYPOINT}
    storage = data.get("checkpoint_storage")
    if isinstance(storage, dict) and storage.get("type") == "directory" and isinstance(
            storage.get("container_path"), str):
        data["checkpoint_storage"] = {"type": "shared_fs",
                                      "host_path": storage["container_path"]}
    return data


def normalized_config(text: str, default_storage: dict[str, Any],
                      storage_roots: Sequence[str] | None = None,
                      cluster_storage: dict[str, Any] | None = None,
                      unmanaged: bool = False, check_storage: bool = True) -> CheckedConfig:
    """Validate the YAML and fill in the master's default checkpoint storage; with
    `storage_roots`, shared_fs storage and the host side of `bind_mounts` must lie under one of
    them (a task container runs as the agent's user: a mount of its home or the cluster's state
    would hand the trial their secrets). S3 storage needs credentials the master may use to
    restore and delete its checkpoints. An unmanaged experiment's config (Determined's core_v2)
    has no entrypoint. Without `check_storage`, the storage the master cannot use is left to
    the caller (an imported experiment's is a warning: services/history_import/)."""
    try:
        data = load_config_yaml(text)
        if unmanaged and isinstance(data, dict):
            data = _unmanaged_config(data)
        config = parse_experiment_data(data, default_storage=default_storage)
    except ConfigError as err:
        raise Invalid("invalid experiment config", list(err.errors)) from err
    dumped = config.model_dump(mode="json")
    if unmanaged and dumped.get("entrypoint") == _NO_ENTRYPOINT:
        del dumped["entrypoint"]
    sampler = dumped["searcher"].get("sampler")
    if sampler and (problem := sampler_problem(sampler)) is not None:
        raise Invalid("invalid experiment config", [problem])
    directory = shared_fs_directory(dumped["checkpoint_storage"])
    # A detached run's storage is its script's, written where it runs: anywhere (the master
    # never reads nor deletes outside the roots: common/checkpoint_storage.py).
    if storage_roots is not None and directory is not None and not unmanaged and not (
            under_any_root(directory, storage_roots)):
        raise Invalid("invalid experiment config", [
            f"checkpoint_storage.host_path: {directory} is outside the directories this cluster "
            f"keeps checkpoints in ({', '.join(storage_roots)}); an admin can allow more with "
            "EPOCHAL_STORAGE_ROOTS"])
    try:
        if check_storage:
            CheckpointFiles.of(dumped, cluster_storage)
    except StorageError as err:
        raise Invalid("invalid experiment config", [str(err)]) from None
    for i, mount in enumerate(dumped.get("bind_mounts") or []):
        host_path = mount.get("host_path")
        if storage_roots is not None and host_path and not under_any_root(host_path,
                                                                          storage_roots):
            raise Invalid("invalid experiment config", [
                f"bind_mounts[{i}].host_path: {host_path} is outside the directories this "
                f"cluster lets trials mount ({', '.join(storage_roots)}); an admin can allow "
                "more with EPOCHAL_STORAGE_ROOTS"])
    return CheckedConfig(config, dumped)


async def checked_config(text: str, settings: StorageSettings, unmanaged: bool = False
                         ) -> CheckedConfig:
    """`normalized_config` for this master, off the event loop: it keeps answering meanwhile."""
    return await asyncio.to_thread(normalized_config, text, settings.default_storage(),
                                   settings.allowed_storage_roots(), settings.checkpoint_storage,
                                   unmanaged)


def config_mapping(text: str) -> dict[str, Any]:
    """The YAML config as a mapping, for a template to be merged under it (or it over one)."""
    try:
        data = load_config_yaml(text)
    except ConfigError as err:
        raise Invalid("invalid experiment config", err.errors) from err
    if not isinstance(data, dict):
        raise Invalid("invalid experiment config",
                      [f"config: a mapping of config fields, got {type(data).__name__}"])
    return data


async def check_submission(pool: asyncpg.Pool, temporal: Client, settings: StorageSettings,
                           text: str, template: str | None, project_id: int | None
                           ) -> tuple[CheckedConfig, int]:
    """The config of a new experiment, with the named template merged under it, checked, and
    the project it goes to (`resolve_project`). Its pool is the one it names, else its
    workspace's default (`pool_bindings.resolve_pool`), and must be available to its workspace
    and able to hold one of its trials."""
    if template:
        text = await _with_template(pool, text, template)
    checked = await checked_config(text, settings)
    project_id = await resolve_project(pool, project_id, checked.data)
    await place_in_pool(pool, checked, await pool_bindings.workspace_of_project(pool, project_id))
    too_big = await pools.never_fits(temporal, checked.data["resources"])
    if too_big is not None:
        raise Invalid("invalid experiment config", [f"resources.slots_per_trial: {too_big}"])
    return checked, project_id


async def place_in_pool(conn: asyncpg.Pool | asyncpg.Connection, checked: CheckedConfig,
                        workspace_id: int) -> None:
    """Set the config's pool: the one it names, else the workspace's default pool (the aux
    pool for 0 slots per trial); refused when the pool is bound to other workspaces only."""
    resources = checked.model.resources
    named = resources.resource_pool if "resource_pool" in resources.model_fields_set else None
    chosen = await pool_bindings.resolve_pool(conn, workspace_id, named,
                                              resources.slots_per_trial)
    resources.resource_pool = chosen
    checked.data["resources"]["resource_pool"] = chosen


async def _with_template(pool: asyncpg.Pool, text: str, template: str) -> str:
    merged = merge_under(config_mapping(text), await template_config(pool, template))
    return yaml.safe_dump(merged, sort_keys=False)


async def _insert_experiment(
    conn: asyncpg.Connection, checked: CheckedConfig, *, original_config: str, seed: int,
    owner: str | None, project_id: int, parent_id: int | None, planned: int | None,
) -> int:
    """The new experiment's row; its id."""
    config = checked.data
    experiment_id: int = await conn.fetchval(
        "INSERT INTO experiments (name, description, labels, config, original_config, seed,"
        " owner, project_id, parent_id, planned_trials)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        config["name"], config.get("description"), config.get("labels") or [], config,
        original_config, seed, owner, project_id, parent_id, planned,
    )
    return experiment_id


async def start_workflow(
    temporal: Client, experiment_id: int, owner: str, config: dict[str, Any], seed: int, *,
    continued: bool, findable: bool, page: str
) -> None:
    """Start the experiment's workflow (findable in Temporal by its search attributes, its
    memo a summary of its config and its dashboard `page`); a continued experiment's id was
    used before."""
    await temporal.start_workflow(
        EXPERIMENT_WORKFLOW,
        ExperimentInput(experiment_id=experiment_id, config=config, seed=seed,
                        agent_timeout_seconds=agent_timeout_seconds()),
        id=experiment_workflow_id(experiment_id),
        task_queue=MASTER_TASK_QUEUE,
        id_reuse_policy=(WorkflowIDReusePolicy.ALLOW_DUPLICATE if continued
                         else WorkflowIDReusePolicy.REJECT_DUPLICATE),
        search_attributes=experiment_attributes(experiment_id, owner, config)
        if findable else None,
        memo=payload_codec.in_clear(experiment_memo(config, page)),  # shown by Temporal's UI
    )


async def submit(
    pool: asyncpg.Pool, temporal: Client, checked: CheckedConfig, *, original_config: str,
    owner: str | None, project_id: int, parent_id: int | None, model_definition: bytes,
    model_size: int, findable: bool, page_of: Callable[[int], str],
) -> int:
    """Store the experiment and its model definition in one transaction, then start its
    workflow; the new experiment's id. If Temporal refuses, no experiment row is left behind
    (Unavailable)."""
    config = checked.data
    seed = (config.get("reproducibility") or {}).get("experiment_seed")
    if seed is None:
        seed = secrets.randbelow(2**31)
    async with pool.acquire() as conn, conn.transaction():
        experiment_id = await _insert_experiment(
            conn, checked, original_config=original_config, seed=seed, owner=owner,
            project_id=project_id, parent_id=parent_id, planned=planned_trials(checked.model))
        await conn.execute(
            "INSERT INTO model_definitions (experiment_id, tgz, size_bytes) VALUES ($1, $2, $3)",
            experiment_id, model_definition, model_size)
    # Started once the rows are committed (its first trial's row refers to them); if Temporal
    # refuses, no experiment row is left behind.
    try:
        await start_workflow(temporal, experiment_id, owner or "", config, seed,
                             continued=False, findable=findable, page=page_of(experiment_id))
    except BaseException as err:
        await pool.execute("DELETE FROM experiments WHERE id = $1", experiment_id)
        if isinstance(err, RPCError | WorkflowAlreadyStartedError):
            raise Unavailable(f"cannot start the experiment's workflow: {err}") from err
        raise
    weight = config["resources"].get("weight")
    if weight is not None:  # the scheduler keeps it as it keeps `det experiment set weight`
        change = ExperimentResources(experiment_id=experiment_id, weight=weight)
        await pools.signal_pool(temporal, config["resources"]["resource_pool"],
                                PoolMessages.SET_EXPERIMENT_RESOURCES, change)
    return experiment_id


async def store_unmanaged(pool: asyncpg.Pool, checked: CheckedConfig, *, original_config: str,
                          owner: str, project_id: int, external_id: str | None) -> int:
    """An experiment whose trials a script outside the cluster creates, reports and ends
    (Determined's core_v2): its row only; no workflow runs it. Its id."""
    async with pool.acquire() as conn, conn.transaction():
        experiment_id = await _insert_experiment(
            conn, checked, original_config=original_config, seed=secrets.randbelow(2**31),
            owner=owner, project_id=project_id, parent_id=None, planned=None)
        await conn.execute(
            "UPDATE experiments SET unmanaged = true, external_id = $2 WHERE id = $1",
            experiment_id, external_id)
    return experiment_id


async def continue_experiment(
    pool: asyncpg.Pool, temporal: Client, settings: StorageSettings, row: asyncpg.Record,
    override_text: str | None, *, findable: bool, page: str,
) -> None:
    """Train an ended single-trial experiment's trial on from its latest checkpoint, under the
    same experiment and trial ids, with the override merged over its config. `row` is the
    experiment's (its id, state, owner, config and trial ids), checked ended and managed."""
    experiment_id = row["id"]
    if len(row["trial_ids"]) != 1:
        raise Invalid("only a single-trial experiment can be continued", [
            f"id: experiment {experiment_id} has {len(row['trial_ids'])} trials"])
    override = config_mapping(override_text or "{}") if (override_text or "").strip() else {}
    merged = merge_under(override, row["config"])
    searcher = merged.get("searcher")
    if not isinstance(searcher, dict):
        searcher = {}
    if searcher.get("name") != row["config"]["searcher"]["name"]:
        raise Invalid("the searcher of a continued experiment cannot change", [
            f"searcher.name: is {row['config']['searcher']['name']!r},"
            f" got {searcher.get('name')!r}"])
    config = (await checked_config(yaml.safe_dump(merged, sort_keys=False), settings)).data
    workspace_id = await pool.fetchval(
        "SELECT p.workspace_id FROM experiments e JOIN projects p ON p.id = e.project_id"
        " WHERE e.id = $1", experiment_id)
    await pool_bindings.check_pool_usable(pool, workspace_id, config["resources"]["resource_pool"])
    (trial_id,) = row["trial_ids"]
    seed: int | None = await pool.fetchval(
        "SELECT seed FROM experiments WHERE id = $1", experiment_id)
    assert seed is not None
    await pools.signal_scheduler(temporal, config["resources"]["resource_pool"],
                                 PoolMessages.REOPEN_TRIAL,
                                 ReopenTrial(experiment_id=experiment_id, trial_id=trial_id))
    async with pool.acquire() as conn, conn.transaction():
        # The experiment and its one trial running again, under the new config.
        await conn.execute(
            "UPDATE experiments SET config = $2, state = $3, end_time = NULL WHERE id = $1",
            experiment_id, config, ExperimentState.ACTIVE)
        await conn.execute(
            "UPDATE trials SET state = $2, end_time = NULL, restarts = 0 WHERE id = $1",
            trial_id, TrialState.QUEUED)
        # Inside the transaction: if Temporal refuses, the experiment stays as it ended.
        try:
            await start_workflow(temporal, experiment_id, row["owner"], config, seed,
                                 continued=True, findable=findable, page=page)
        except WorkflowAlreadyStartedError as err:
            raise Conflict(f"experiment {experiment_id} is still finishing: try again in"
                           " a moment") from err
