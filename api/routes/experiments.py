"""Experiments: create, list, describe, control, and what belongs to them."""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import Sequence
from typing import Annotated, Any

import asyncpg
import yaml
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from temporalio.client import WorkflowHandle
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities import checkpoint_gc
from activities.log_retention import FOREVER, MAX_DAYS
from activities.model_sampling import sampler_problem
from activities.pool_start import signal_pool
from api import auth, unmanaged, views
from api.deps import AppSettings, Pool, Temporal
from api.errors import ApiError, not_found, require_choice
from api.log_stream import experiment_ended, stream_logs
from api.model_definition import build_tarball, file_content, file_tree
from api.queries import checkpoints as checkpoint_queries
from api.queries import experiments as experiment_queries
from api.queries import logs as log_queries
from api.queries import trials as trial_queries
from api.queries import unmanaged as unmanaged_queries
from api.routes import models
from api.routes.agents import never_fits
from api.routes.templates import merge_under, template_config
from api.routes.workspaces import resolve_project
from api.schemas import Empty, answers
from api.schemas import checkpoints as checkpoint_schemas
from api.schemas import experiments as experiment_schemas
from api.schemas import trials as trial_schemas
from api.search_preview import search_summary
from api.settings import Settings
from common import payload_codec
from common.checkpoint_storage import (
    CheckpointFiles,
    StorageError,
    StorageOutsideRoots,
    UnsafeCheckpointPath,
    shared_fs_directory,
    under_any_root,
)
from common.expconf import (
    ConfigError,
    ExperimentConfig,
    RetentionCounts,
    config_warnings,
    load_config_yaml,
    parse_experiment_config,
    planned_trials,
    validate_experiment_config,
)
from common.search_attributes import experiment_attributes, experiment_memo
from common.states import TERMINAL_STATES
from common.temporal_names import (
    EXPERIMENT_WORKFLOW,
    MASTER_TASK_QUEUE,
    ExperimentMessages,
    PoolMessages,
    experiment_workflow_id,
)
from wire.pools import ExperimentResources, ReopenTrial
from wire.workflow_io import ExperimentInput

router = APIRouter(prefix="/api/v1", tags=["experiments"])

MAX_COUNT = 2**31 - 1  # Determined's int32 fields


class ModelFile(BaseModel):
    path: str
    type: int = 48
    content: str = ""
    mode: int = 0o644
    mtime: int = 0
    uid: int = 0
    gid: int = 0


class CreateExperimentRequest(BaseModel):
    config: str = Field(description="The experiment config as YAML text")
    modelDefinition: list[ModelFile] = Field(default_factory=list)
    activate: bool = True
    parentId: int | None = None
    projectId: int | None = None
    validateOnly: bool = False
    template: str | None = None
    unmanaged: bool = False


# What a detached run's config is validated with in place of the entrypoint it has not got (the
# script runs outside the cluster); the stored config has none.
_NO_ENTRYPOINT = "true"


def _unmanaged_config(data: dict[str, Any]) -> dict[str, Any]:
    """A detached script's config as the master keeps it: the placeholder entrypoint, and its
    `directory` storage (core_v2's default: a directory of the script's host, written by the
    script) as the shared_fs storage at that path the master reads, restores and collects."""
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
                      unmanaged: bool = False) -> dict[str, Any]:
    """Validate the YAML and fill in the master's default checkpoint storage; with
    `storage_roots`, shared_fs storage and the host side of `bind_mounts` must lie under one of
    them (a task container runs as the agent's user: a mount of its home or the cluster's state
    would hand the trial their secrets). S3 storage needs credentials the master may use to
    restore and delete its checkpoints. An unmanaged experiment's config (Determined's core_v2)
    has no entrypoint."""
    try:
        if unmanaged:
            data = load_config_yaml(text)
            if isinstance(data, dict):
                text = yaml.safe_dump(_unmanaged_config(data), sort_keys=False)
        config = parse_experiment_config(text, source="config", default_storage=default_storage)
    except ConfigError as err:
        raise ApiError(400, "invalid experiment config", list(err.errors)) from err
    dumped = config.model_dump(mode="json")
    if unmanaged and dumped.get("entrypoint") == _NO_ENTRYPOINT:
        del dumped["entrypoint"]
    sampler = dumped["searcher"].get("sampler")
    if sampler and (problem := sampler_problem(sampler)) is not None:
        raise ApiError(400, "invalid experiment config", [problem])
    directory = shared_fs_directory(dumped["checkpoint_storage"])
    # A detached run's storage is its script's, written where it runs: anywhere (the master
    # never reads nor deletes outside the roots: common/checkpoint_storage.py).
    if storage_roots is not None and directory is not None and not unmanaged and not (
            under_any_root(directory, storage_roots)):
        raise ApiError(400, "invalid experiment config", [
            f"checkpoint_storage.host_path: {directory} is outside the directories this cluster "
            f"keeps checkpoints in ({', '.join(storage_roots)}); an admin can allow more with "
            "EPOCHAL_STORAGE_ROOTS"])
    try:
        CheckpointFiles.of(dumped, cluster_storage)
    except StorageError as err:
        raise ApiError(400, "invalid experiment config", [str(err)]) from None
    for i, mount in enumerate(dumped.get("bind_mounts") or []):
        host_path = mount.get("host_path")
        if storage_roots is not None and host_path and not under_any_root(host_path,
                                                                          storage_roots):
            raise ApiError(400, "invalid experiment config", [
                f"bind_mounts[{i}].host_path: {host_path} is outside the directories this "
                f"cluster lets trials mount ({', '.join(storage_roots)}); an admin can allow "
                "more with EPOCHAL_STORAGE_ROOTS"])
    return dumped


async def checked_config(text: str, settings: Settings, unmanaged: bool = False
                         ) -> dict[str, Any]:
    """`normalized_config` for this master, off the event loop: it keeps answering meanwhile."""
    return await asyncio.to_thread(normalized_config, text, settings.default_storage(),
                                   settings.allowed_storage_roots(), settings.checkpoint_storage,
                                   unmanaged)


async def _start_experiment(
    temporal: Temporal, experiment_id: int, owner: str, config: dict[str, Any], seed: int, *,
    continued: bool, findable: bool, page: str
) -> None:
    """Start the experiment's workflow (findable in Temporal by its search attributes, its
    memo a summary of its config and its dashboard `page`); a continued experiment's id was
    used before."""
    await temporal.start_workflow(
        EXPERIMENT_WORKFLOW,
        ExperimentInput(experiment_id=experiment_id, config=config, seed=seed),
        id=experiment_workflow_id(experiment_id),
        task_queue=MASTER_TASK_QUEUE,
        id_reuse_policy=(WorkflowIDReusePolicy.ALLOW_DUPLICATE if continued
                         else WorkflowIDReusePolicy.REJECT_DUPLICATE),
        search_attributes=experiment_attributes(experiment_id, owner, config)
        if findable else None,
        memo=payload_codec.in_clear(experiment_memo(config, page)),  # shown by Temporal's UI
    )


@router.post("/experiments", **answers(experiment_schemas.ExperimentCreated))
async def create_experiment(
    body: CreateExperimentRequest,
    request: Request,
    pool: Pool,
    temporal: Temporal,
    settings: AppSettings,
) -> dict[str, Any]:
    """Determined's CreateExperiment. With `template` the named config template is merged under
    the config; with `parentId` (a fork) the parent's model definition is used when none is
    sent; the project is `projectId`, else the config's `workspace`/`project`, else project 1."""
    owner = auth.require_user(auth.current(request), "create experiments").username
    if body.unmanaged:
        return await _create_unmanaged(body, pool, settings, owner or "", None)
    config_text = body.config
    if body.template:
        config_text = yaml.safe_dump(
            merge_under(_config_mapping(body.config),
                        await template_config(pool, body.template)),
            sort_keys=False)
    config = await checked_config(config_text, settings)
    too_big = await never_fits(temporal, config["resources"])
    if too_big is not None:
        raise ApiError(400, "invalid experiment config",
                       [f"resources.slots_per_trial: {too_big}"])
    project_id = await resolve_project(pool, body.projectId, config)
    if body.validateOnly:
        # Determined answers a validation with a placeholder experiment (`det e create --test`).
        return {
            "experiment": views.unsaved_experiment_json(config, body.config, owner or ""),
            "config": views.shown_config(config),
            "warnings": [],
            "configWarnings": config_warnings(validate_experiment_config(config)),
        }
    if body.parentId is not None and not body.modelDefinition:
        parent_tgz = await experiment_queries.fetch_model_definition(pool, body.parentId)
        if parent_tgz is None:
            raise ApiError(400, f"experiment {body.parentId} not found",
                           [f"parentId: no experiment {body.parentId} to fork"])
        tgz, size = parent_tgz, len(parent_tgz)
    else:
        tgz, size = build_tarball(
            [f.model_dump() for f in body.modelDefinition], settings.max_model_definition_bytes
        )
    seed = (config.get("reproducibility") or {}).get("experiment_seed")
    if seed is None:
        seed = secrets.randbelow(2**31)
    async with pool.acquire() as conn, conn.transaction():
        experiment_id = await experiment_queries.insert_experiment(
            conn,
            name=config["name"],
            description=config.get("description"),
            labels=config.get("labels") or [],
            config=config,
            original_config=body.config,
            seed=seed,
            owner=owner,
            project_id=project_id,
            parent_id=body.parentId,
            planned_trials=planned_trials(ExperimentConfig.model_validate(config)),
        )
        await experiment_queries.insert_model_definition(conn, experiment_id, tgz, size)
    # Started once the rows are committed (its first trial's row refers to them); if Temporal
    # refuses, no experiment row is left behind.
    try:
        await _start_experiment(temporal, experiment_id, owner or "", config, seed,
                                continued=False, findable=request.app.state.findable,
                                page=settings.experiment_page(experiment_id))
    except BaseException as err:
        await experiment_queries.delete_experiment(pool, experiment_id)
        if isinstance(err, RPCError | WorkflowAlreadyStartedError):
            raise ApiError(503, f"cannot start the experiment's workflow: {err}") from err
        raise
    weight = config["resources"].get("weight")
    if weight is not None:  # the scheduler keeps it as it keeps `det experiment set weight`
        change = ExperimentResources(experiment_id=experiment_id, weight=weight)
        await signal_pool(temporal, config["resources"]["resource_pool"],
                          PoolMessages.SET_EXPERIMENT_RESOURCES, change)
    row = await experiment_queries.fetch_experiment_row(pool, experiment_id)
    assert row is not None
    if not body.activate:
        await _signal(temporal, pool, experiment_id, ExperimentMessages.PAUSE)
    # Determined fields kept but not acted on (common/expconf/); the CLIs print them.
    # `warnings` holds Determined's LaunchWarning values only (`det` refuses anything else).
    warnings = config_warnings(validate_experiment_config(config))
    return {
        "experiment": views.experiment_json(row),
        "config": views.shown_config(config),
        "warnings": [],
        "configWarnings": warnings,
    }


@router.put("/experiments/by-external-id/{external_experiment_id}",
            **answers(experiment_schemas.ExperimentCreated))
async def put_experiment(
    external_experiment_id: Annotated[
        str, Path(min_length=1, max_length=unmanaged.MAX_EXTERNAL_ID)],
    body: CreateExperimentRequest, request: Request, pool: Pool, settings: AppSettings,
) -> dict[str, Any]:
    """Determined's PutExperiment (core_v2's `external_experiment_id`): the unmanaged experiment
    with this external id, made by the first call; a script run again reports to it."""
    owner = auth.require_user(auth.current(request), "create experiments").username or ""
    if not body.unmanaged:
        raise ApiError(400, "only unmanaged experiments are made by external id",
                       ["unmanaged: must be true"])
    found = await unmanaged_queries.fetch_experiment_by_external_id(pool, external_experiment_id)
    if found is None:
        try:
            return await _create_unmanaged(body, pool, settings, owner, external_experiment_id)
        except asyncpg.UniqueViolationError:  # another call made it meanwhile
            found = await unmanaged_queries.fetch_experiment_by_external_id(
                pool, external_experiment_id)
            assert found is not None
    if not found["unmanaged"]:
        raise ApiError(409, f"external id {external_experiment_id!r} names experiment "
                       f"{found['id']}, which the cluster runs")
    await auth.require_owner(request, found["id"], "report to")
    row = await _experiment_row(pool, found["id"])
    return {"experiment": views.experiment_json(row), "config": views.shown_config(row["config"]),
            "warnings": [], "configWarnings": []}


async def _create_unmanaged(body: CreateExperimentRequest, pool: Pool, settings: Settings,
                            owner: str, external_id: str | None) -> dict[str, Any]:
    """An experiment whose trials a script outside the cluster creates, reports and ends
    (Determined's core_v2): rows only; no workflow runs it."""
    config = await checked_config(body.config, settings, unmanaged=True)
    project_id = await resolve_project(pool, body.projectId, config)
    async with pool.acquire() as conn, conn.transaction():
        experiment_id = await experiment_queries.insert_experiment(
            conn, name=config["name"], description=config.get("description"),
            labels=config.get("labels") or [], config=config, original_config=body.config,
            seed=secrets.randbelow(2**31), owner=owner, project_id=project_id,
            parent_id=None, planned_trials=None)
        await unmanaged_queries.mark_unmanaged(conn, experiment_id, external_id)
    row = await _experiment_row(pool, experiment_id)
    return {"experiment": views.experiment_json(row), "config": views.shown_config(config),
            "warnings": [], "configWarnings": []}


def _config_mapping(text: str) -> dict[str, Any]:
    """The YAML config as a mapping, for a template to be merged under it."""
    try:
        data = load_config_yaml(text)
    except ConfigError as err:
        raise ApiError(400, "invalid experiment config", err.errors) from err
    if not isinstance(data, dict):
        raise ApiError(400, "invalid experiment config",
                       [f"config: a mapping of config fields, got {type(data).__name__}"])
    return data


class ContinueExperimentRequest(BaseModel):
    """Determined's ContinueExperiment (`det experiment continue ID [--config-file F]`)."""

    id: int
    overrideConfig: str | None = None


@router.post("/experiments/continue", **answers(experiment_schemas.PatchedExperiment))
async def continue_experiment(
    body: ContinueExperimentRequest, request: Request, pool: Pool, temporal: Temporal,
    settings: AppSettings,
) -> dict[str, Any]:
    """Train an ended single-trial experiment's trial on from its latest checkpoint, under the
    same experiment and trial ids, with `overrideConfig` merged over its config (e.g. a longer
    `searcher.max_length`). The trial's runs are numbered from 1 again."""
    experiment_id = body.id
    await auth.require_owner(request, experiment_id, "continue")
    row = await _experiment_row(pool, experiment_id)
    if row["state"] not in TERMINAL_STATES or row["state"] == "DELETED":
        raise ApiError(409, f"experiment {experiment_id} is {row['state']}: only an ended"
                       " experiment can be continued")
    if row["unmanaged"]:
        raise ApiError(409, f"experiment {experiment_id} is unmanaged: its script runs outside "
                       "the cluster (run it again with the same external ids to resume it)")
    if len(row["trial_ids"]) != 1:
        raise ApiError(400, "only a single-trial experiment can be continued", [
            f"id: experiment {experiment_id} has {len(row['trial_ids'])} trials"])
    override = _config_mapping(body.overrideConfig or "{}") if (
        body.overrideConfig or "").strip() else {}
    merged = merge_under(override, row["config"])
    searcher = merged.get("searcher")
    if not isinstance(searcher, dict):
        searcher = {}
    if searcher.get("name") != row["config"]["searcher"]["name"]:
        raise ApiError(400, "the searcher of a continued experiment cannot change", [
            f"searcher.name: is {row['config']['searcher']['name']!r},"
            f" got {searcher.get('name')!r}"])
    config = await checked_config(yaml.safe_dump(merged, sort_keys=False), settings)
    (trial_id,) = row["trial_ids"]
    seed = await experiment_queries.fetch_experiment_seed(pool, experiment_id)
    assert seed is not None
    try:
        await signal_pool(temporal, config["resources"]["resource_pool"], PoolMessages.REOPEN_TRIAL,
                          ReopenTrial(experiment_id=experiment_id, trial_id=trial_id))
    except RPCError as err:
        raise ApiError(503, f"cannot reach the scheduler: {err.message}") from err
    async with pool.acquire() as conn, conn.transaction():
        await experiment_queries.reopen_experiment(conn, experiment_id, trial_id, config)
        # Inside the transaction: if Temporal refuses, the experiment stays as it ended.
        try:
            await _start_experiment(temporal, experiment_id, row["owner"], config, seed,
                                    continued=True, findable=request.app.state.findable,
                                    page=settings.experiment_page(experiment_id))
        except WorkflowAlreadyStartedError as err:
            raise ApiError(409, f"experiment {experiment_id} is still finishing: try again in"
                           " a moment") from err
    return {"experiment": views.experiment_json(await _experiment_row(pool, experiment_id))}




@router.get("/experiments", **answers(experiment_schemas.ExperimentList))
async def list_experiments(
    pool: Pool,
    limit: int = Query(100, ge=0, le=1000),
    offset: int = Query(0, ge=0),
    states: views.ListQuery = None,
    sortBy: str = "SORT_BY_ID",
    orderBy: views.OrderBy = "ORDER_BY_ASC",
    archived: bool | None = None,
    name: str | None = None,
    description: str | None = None,
    labels: views.ListQuery = None,
    users: views.ListQuery = None,
    userIds: Annotated[list[int] | None, Query()] = None,
    projectId: int | None = None,
    showTrialData: bool = False,  # noqa: ARG001 (the best trial and its metric are always shown)
) -> dict[str, Any]:
    """Determined's GetExperiments: every filter optional; `archived` omitted lists both."""
    wanted = [s.removeprefix("STATE_") for s in states] if states else None
    require_choice("sortBy", sortBy, experiment_queries.EXPERIMENT_SORT_COLUMNS)
    limit = limit or 100  # Determined's client sends 0 for "the default"
    rows, total = await experiment_queries.fetch_experiment_rows(
        pool,
        where=experiment_queries.ExperimentFilter(
            states=wanted, archived=archived, name=name or None, description=description or None,
            labels=labels or None, users=users or None, user_ids=userIds or None,
            project_id=projectId or None,
        ),
        sort_by=sortBy,
        order_desc=orderBy == "ORDER_BY_DESC",
        limit=limit,
        offset=offset,
    )
    experiments = [views.experiment_json(r) for r in rows]
    return {
        "experiments": experiments,
        "pagination": views.pagination(offset, limit, len(experiments), total),
    }


async def _experiment_row(pool: Pool, experiment_id: int) -> Any:
    row = await experiment_queries.fetch_experiment_row(pool, experiment_id)
    if row is None:
        raise not_found("experiment", experiment_id)
    return row


@router.get("/experiments/{experiment_id}", **answers(experiment_schemas.ExperimentAnswer))
async def get_experiment(experiment_id: int, pool: Pool) -> dict[str, Any]:
    row = await _experiment_row(pool, experiment_id)
    return {"experiment": views.experiment_json(row),
            "config": views.shown_config(row["config"])}


async def _signal(temporal: Temporal, pool: Pool, experiment_id: int, signal: str) -> None:
    row = await _experiment_row(pool, experiment_id)
    if row["state"] in TERMINAL_STATES:
        raise ApiError(
            409, f"experiment {experiment_id} is {row['state']}: it can no longer {signal}"
        )
    if row["unmanaged"]:
        await unmanaged.control(pool, experiment_id, signal)
        return
    handle: WorkflowHandle[Any, Any] = temporal.get_workflow_handle(
        experiment_workflow_id(experiment_id)
    )
    try:
        await handle.signal(signal)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise ApiError(409, f"experiment {experiment_id} is no longer running") from err
        raise


def _control_route(signal: str) -> None:
    async def control(
        experiment_id: int, request: Request, pool: Pool, temporal: Temporal
    ) -> dict[str, Any]:
        await _signal(temporal, pool, experiment_id, signal)
        return {}

    control.__name__ = f"{signal}_experiment"
    router.post(
        f"/experiments/{{experiment_id}}/{signal}",
        summary=f"{signal.capitalize()} an experiment",
        **answers(Empty),
    )(control)


for _signal_name in (ExperimentMessages.PAUSE, ExperimentMessages.ACTIVATE,
                     ExperimentMessages.CANCEL, ExperimentMessages.KILL):
    _control_route(_signal_name)


class ResourcesPatch(BaseModel):
    """Determined's PatchExperiment.resources (`det experiment set priority|max-slots|weight`)."""

    priority: int | None = Field(None, ge=1, le=99)
    maxSlots: int | None = Field(None, ge=0)
    weight: float | None = Field(None, gt=0)


class CheckpointStoragePatch(BaseModel):
    """Determined's PatchExperiment.checkpointStorage (`det experiment set gc-policy`): the
    retention counts; the storage itself never changes."""

    saveExperimentBest: int = Field(0, ge=0, le=MAX_COUNT)
    saveTrialBest: int = Field(0, ge=0, le=MAX_COUNT)
    saveTrialLatest: int = Field(0, ge=0, le=MAX_COUNT)

    def counts(self) -> RetentionCounts:
        return RetentionCounts(save_experiment_best=self.saveExperimentBest,
                               save_trial_best=self.saveTrialBest,
                               save_trial_latest=self.saveTrialLatest)


class PatchExperimentRequest(BaseModel):
    """Determined's PatchExperiment (`det e set name|description|priority|max-slots|weight|
    gc-policy`, `det e label add|remove`, the web UI's notes)."""

    id: int | None = None
    name: str | None = Field(None, min_length=1, max_length=1000)
    description: str | None = Field(None, max_length=10_000)
    labels: list[str] | None = Field(None, max_length=1000)
    notes: str | None = Field(None, max_length=100_000)
    resources: ResourcesPatch | None = None
    checkpointStorage: CheckpointStoragePatch | None = None


@router.patch("/experiments/{experiment_id}", **answers(experiment_schemas.PatchedExperiment))
async def patch_experiment(
    experiment_id: int, body: PatchExperimentRequest, request: Request, pool: Pool,
    temporal: Temporal, settings: AppSettings,
) -> dict[str, Any]:
    if body.id not in (None, experiment_id):
        raise ApiError(400, "id does not match",
                       [f"id: is {body.id}, but the path names experiment {experiment_id}"])
    await _experiment_row(pool, experiment_id)
    if body.resources is not None:
        await change_experiment_resources(request, pool, temporal, experiment_id, body.resources)
    if body.checkpointStorage is not None:
        await _change_gc_policy(pool, settings, experiment_id, body.checkpointStorage.counts())
    await experiment_queries.update_experiment(
        pool, experiment_id, name=body.name, description=body.description,
        labels=None if body.labels is None else sorted(set(body.labels)), notes=body.notes)
    return {"experiment": views.experiment_json(await _experiment_row(pool, experiment_id))}


async def change_experiment_resources(
    request: Request, pool: Pool, temporal: Temporal, experiment_id: int, patch: ResourcesPatch
) -> None:
    """New priority, max_slots or weight: kept in the stored config and, while the experiment
    runs, sent to its pool's scheduler, which applies them to its waiting and later requests."""
    await auth.require_owner(request, experiment_id, "change")
    changes = {key: value for key, value in (
        ("priority", patch.priority), ("max_slots", patch.maxSlots), ("weight", patch.weight),
    ) if value is not None}
    if not changes:
        return
    async with pool.acquire() as conn, conn.transaction():
        row = await experiment_queries.lock_experiment_config(conn, experiment_id)
        if row is None:
            raise not_found("experiment", experiment_id)
        config = row["config"]
        config["resources"] = {**config["resources"], **changes}
        await experiment_queries.update_experiment_config(conn, experiment_id, config)
    if row["state"] in TERMINAL_STATES:
        return
    change = ExperimentResources(experiment_id=experiment_id, priority=patch.priority,
                                 max_slots=patch.maxSlots, weight=patch.weight)
    try:
        await signal_pool(temporal, config["resources"]["resource_pool"],
                          PoolMessages.SET_EXPERIMENT_RESOURCES, change)
    except RPCError as err:
        raise ApiError(503, f"cannot reach the scheduler: {err.message}") from err


async def _change_gc_policy(pool: Pool, settings: Settings, experiment_id: int,
                            counts: RetentionCounts) -> None:
    """New retention counts in the stored config; an ended experiment's checkpoints are
    collected by them now, a running one's when it ends (as its end always does)."""
    async with pool.acquire() as conn, conn.transaction():
        row = await experiment_queries.lock_experiment_config(conn, experiment_id)
        if row is None:
            raise not_found("experiment", experiment_id)
        config = row["config"]
        config["checkpoint_storage"] = {**(config.get("checkpoint_storage") or {}),
                                        **counts.model_dump()}
        await experiment_queries.update_experiment_config(conn, experiment_id, config)
    if row["state"] not in TERMINAL_STATES:
        return
    files = await _storage_files(config, settings, experiment_id)
    await checkpoint_gc.collect_garbage(pool, experiment_id, config, files)


async def _storage_files(config: dict[str, Any], settings: Settings,
                         experiment_id: int) -> CheckpointFiles:
    try:
        return CheckpointFiles.of(config, settings.checkpoint_storage,
                                  settings.allowed_storage_roots())
    except StorageOutsideRoots as err:
        raise ApiError(409, f"experiment {experiment_id}: {err}") from None
    except StorageError as err:
        raise ApiError(502, f"experiment {experiment_id}: {err}") from None


class RetainLogsRequest(BaseModel):
    """Determined's PutExperimentRetainLogs (`det experiment set log-retention ID --days N|
    --forever`)."""

    experimentId: int | None = None
    numDays: int = Field(ge=FOREVER, le=MAX_DAYS,
                         description="Days the logs are kept after each trial ends; -1: for ever")


@router.put("/experiments/{experiment_id}/retain_logs", **answers(Empty))
async def retain_experiment_logs(
    experiment_id: int, body: RetainLogsRequest, pool: Pool
) -> dict[str, Any]:
    """The log retention of every trial of the experiment, and of those it starts later
    (activities/log_retention.py deletes what has expired)."""
    if body.experimentId not in (None, experiment_id):
        raise ApiError(400, "experimentId does not match", [
            f"experimentId: is {body.experimentId}, but the path names {experiment_id}"])
    async with pool.acquire() as conn, conn.transaction():
        if not await experiment_queries.set_log_retention(conn, experiment_id, body.numDays):
            raise not_found("experiment", experiment_id)
    return {}


@router.delete("/experiments/{experiment_id}/tensorboard-files", **answers(Empty))
async def delete_tensorboard_files(
    experiment_id: int, pool: Pool, settings: AppSettings
) -> dict[str, Any]:
    """`det experiment delete-tb-files`: the TensorBoard files Determined's Core API uploaded
    beside the experiment's checkpoints go from its storage."""
    row = await _experiment_row(pool, experiment_id)
    files = await _storage_files(row["config"], settings, experiment_id)
    try:
        await asyncio.to_thread(checkpoint_gc.delete_tensorboard_files, files,
                                settings.cluster_id, experiment_id)
    except StorageError as err:
        raise ApiError(502, f"experiment {experiment_id}: {err}") from None
    return {}


class PreviewSearchRequest(BaseModel):
    """Determined's PreviewHPSearch: an experiment config as a JSON object."""

    config: dict[str, Any]


@router.post("/preview-hp-search", **answers(experiment_schemas.SearchPreview))
async def preview_search(body: PreviewSearchRequest) -> dict[str, Any]:
    """`det preview-search CONFIG`: what the config's searcher would do (api/search_preview.py);
    nothing starts. The config is checked as a submission's is (within the same bounds); its
    entrypoint may be left out."""
    data = dict(body.config)
    if "searcher" not in data:
        raise ApiError(400, "invalid experiment config", ["searcher: field required"])
    data.setdefault("entrypoint", "preview")
    config = await asyncio.to_thread(_preview_config, data)
    return {"summary": search_summary(config)}


def _preview_config(data: dict[str, Any]) -> ExperimentConfig:
    try:
        return parse_experiment_config(yaml.safe_dump(data, sort_keys=False), source="config")
    except (ConfigError, yaml.YAMLError) as err:
        details = list(err.errors) if isinstance(err, ConfigError) else [str(err)]
        raise ApiError(400, "invalid experiment config", details) from err


class MoveExperimentRequest(BaseModel):
    destinationProjectId: int
    experimentId: int | None = None


@router.post("/experiments/{experiment_id}/move", **answers(Empty))
async def move_experiment(
    experiment_id: int, body: MoveExperimentRequest, request: Request, pool: Pool
) -> dict[str, Any]:
    """`det experiment move ID WORKSPACE PROJECT`: the experiment changes project."""
    if body.experimentId not in (None, experiment_id):
        raise ApiError(400, "experimentId does not match", [
            f"experimentId: is {body.experimentId}, but the path names {experiment_id}"])
    await _experiment_row(pool, experiment_id)
    project_id = await resolve_project(pool, body.destinationProjectId, {},
                                       "destinationProjectId")
    await experiment_queries.move_experiment(pool, experiment_id, project_id)
    return {}


async def _set_archived(request: Request, pool: Pool, experiment_id: int, archived: bool) -> None:
    action = "archive" if archived else "unarchive"
    row = await _experiment_row(pool, experiment_id)
    if row["state"] not in TERMINAL_STATES:
        raise ApiError(409, f"experiment {experiment_id} is {row['state']}: only an ended"
                       f" experiment can be {action}d")
    await experiment_queries.set_experiment_archived(pool, experiment_id, archived)


@router.post("/experiments/{experiment_id}/archive", **answers(Empty))
async def archive_experiment(experiment_id: int, request: Request, pool: Pool) -> dict[str, Any]:
    """Hide an ended experiment from the default list (Determined's archive)."""
    await _set_archived(request, pool, experiment_id, True)
    return {}


@router.post("/experiments/{experiment_id}/unarchive", **answers(Empty))
async def unarchive_experiment(
    experiment_id: int, request: Request, pool: Pool
) -> dict[str, Any]:
    await _set_archived(request, pool, experiment_id, False)
    return {}


@router.delete("/experiments/{experiment_id}", **answers(Empty))
async def delete_experiment(experiment_id: int, request: Request, pool: Pool,
                            settings: AppSettings) -> dict[str, Any]:
    """Delete an ended experiment: its checkpoints' files (only inside its storage, as the
    retention GC deletes them), then its rows (trials, metrics, logs and checkpoints go with
    it). One with checkpoints registered as model versions is refused, as in Determined; one
    whose storage cannot be reached is refused and kept whole."""
    row = await _experiment_row(pool, experiment_id)
    if row["state"] not in TERMINAL_STATES:
        raise ApiError(409, f"experiment {experiment_id} is {row['state']}: kill or cancel it"
                       " and wait for it to end before deleting it")
    registered = await models.registered_versions(pool, experiment_id)
    if registered:
        raise ApiError(409, f"experiment {experiment_id} has checkpoints registered as model"
                            f" versions ({', '.join(registered[:10])}): delete those versions"
                            " first")
    paths = await experiment_queries.fetch_checkpoint_paths(pool, experiment_id)
    try:
        files = CheckpointFiles.of(row["config"], settings.checkpoint_storage,
                                   settings.allowed_storage_roots())
        await asyncio.to_thread(_delete_checkpoints, files, paths)
    except StorageOutsideRoots:
        pass  # a detached run's files: its script's host keeps them, the rows go
    except StorageError as err:
        raise ApiError(502, f"experiment {experiment_id} is kept: {err}") from None
    await experiment_queries.delete_experiment(pool, experiment_id)
    return {}


def _delete_checkpoints(files: CheckpointFiles, paths: list[str]) -> None:
    for path in paths:
        try:
            files.delete(path)
        except UnsafeCheckpointPath:
            continue  # a path outside the storage is never deleted; its row goes anyway


@router.get("/experiments/{experiment_id}/trials", **answers(trial_schemas.TrialList))
async def list_experiment_trials(
    experiment_id: int,
    pool: Pool,
    limit: int = Query(0, ge=0),
    offset: int = Query(0, ge=0),
    sortBy: str = "SORT_BY_ID",
    orderBy: views.OrderBy = "ORDER_BY_ASC",
    states: views.ListQuery = None,
    filter: views.ListQuery = None,  # noqa: A002 (the query's name)
) -> dict[str, Any]:
    """Determined's GetExperimentTrials; limit 0 means all. `sortBy` also takes
    `hp.<hyperparameter>` (dotted for a nested one); `filter` (repeated) keeps the trials that
    meet every condition: `hp.lr<0.01`, `hp.optimizer.name=adam`, `searcherMetric<=0.2`."""
    views.check_trial_sort(sortBy)
    await _experiment_row(pool, experiment_id)
    rows, total = await trial_queries.fetch_trial_page(
        pool, experiment_id,
        states=views.trial_states(states), filters=views.trial_filters(filter),
        sort_by=sortBy, order_desc=orderBy == "ORDER_BY_DESC", limit=limit or None,
        offset=offset)
    page = [views.trial_json(r) for r in rows]
    return {
        "trials": page,
        "pagination": views.pagination(offset, limit or total, len(page), total),
    }


@router.get("/experiments/{experiment_id}/checkpoints",
            **answers(checkpoint_schemas.CheckpointList))
async def list_experiment_checkpoints(
    experiment_id: int,
    pool: Pool,
    limit: int = Query(0, ge=0),
    offset: int = Query(0, ge=0),
    sortByAttr: str = "SORT_BY_END_TIME",
    sortByMetric: str | None = None,
    orderBy: views.OrderBy = "ORDER_BY_UNSPECIFIED",
    states: views.ListQuery = None,
) -> dict[str, Any]:
    """Determined's GetExperimentCheckpoints (`det e list-checkpoints --best N` sorts by the
    searcher metric)."""
    require_choice("sortByAttr", sortByAttr, views.CHECKPOINT_SORT_KEYS)
    row = await _experiment_row(pool, experiment_id)
    rows = await checkpoint_queries.fetch_experiment_checkpoints(pool, experiment_id)
    return views.checkpoint_page(
        [views.checkpoint_json(r, r["searcher_metric"]) for r in rows], row["config"],
        states=states, sort_by_attr=sortByAttr, sort_by_metric=sortByMetric, order_by=orderBy,
        offset=offset, limit=limit,
    )


@router.get("/experiments/{experiment_id}/model_def",
            **answers(experiment_schemas.ModelDefinition))
async def get_model_definition(experiment_id: int, pool: Pool) -> dict[str, str]:
    tgz = await _model_definition(pool, experiment_id)
    return {"b64Tgz": base64.b64encode(tgz).decode()}


async def _model_definition(pool: Pool, experiment_id: int) -> bytes:
    tgz = await experiment_queries.fetch_model_definition(pool, experiment_id)
    if tgz is None:
        raise not_found("model definition of experiment", experiment_id)
    return tgz


@router.get("/experiments/{experiment_id}/file_tree",
            **answers(experiment_schemas.ModelDefinitionTree))
async def get_model_definition_tree(experiment_id: int, pool: Pool) -> dict[str, Any]:
    """Determined's GetModelDefTree: the model definition's files as a tree of FileNodes."""
    return {"files": file_tree(await _model_definition(pool, experiment_id))}


class ModelDefFileRequest(BaseModel):
    path: str = Field(min_length=1, max_length=4096)


@router.post("/experiments/{experiment_id}/file",
             **answers(experiment_schemas.ModelDefinitionFile))
async def get_model_definition_file(
    experiment_id: int, body: ModelDefFileRequest, pool: Pool
) -> dict[str, str]:
    """Determined's GetModelDefFile: one file of the model definition, base64."""
    content = file_content(await _model_definition(pool, experiment_id), body.path)
    if content is None:
        raise ApiError(404, f"experiment {experiment_id}'s model definition has no file "
                            f"{body.path!r}", [f"path: {body.path}"])
    return {"file": base64.b64encode(content).decode()}


@router.get("/experiments/{experiment_id}/logs")
async def experiment_logs(
    experiment_id: int, pool: Pool, follow: bool = False
) -> StreamingResponse:
    await _experiment_row(pool, experiment_id)
    lines = stream_logs(
        pool,
        log_queries.OF_EXPERIMENT,
        experiment_id,
        follow=follow,
        is_done=experiment_ended(pool, experiment_id),
    )
    return StreamingResponse(lines, media_type="application/x-ndjson")
