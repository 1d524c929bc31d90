"""Experiments: create, list, describe, control, and what belongs to them."""

from __future__ import annotations

import asyncio
import base64
from typing import Annotated, Any

import asyncpg
import yaml
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from temporalio.client import WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

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
from api.schemas import Empty, ModelFile, answers
from api.schemas import checkpoints as checkpoint_schemas
from api.schemas import experiments as experiment_schemas
from api.schemas import trials as trial_schemas
from api.search_preview import search_summary
from api.settings import Settings
from common.expconf import (
    ConfigError,
    ExperimentConfig,
    RetentionCounts,
    config_warnings,
    parse_experiment_config,
)
from common.states import TERMINAL_STATES, ExperimentState
from common.temporal_names import ExperimentMessages, experiment_workflow_id
from services import (
    checkpoint_files,
    experiment_settings,
    log_retention,
    models,
    pool_bindings,
    submission,
)
from services.workspaces import resolve_project

router = APIRouter(prefix="/api/v1", tags=["experiments"])

MAX_COUNT = 2**31 - 1  # Determined's int32 fields


class CreateExperimentRequest(BaseModel):
    config: str = Field(description="The experiment config as YAML text")
    modelDefinition: list[ModelFile] = Field(default_factory=list)
    activate: bool = True
    parentId: int | None = None
    projectId: int | None = None
    validateOnly: bool = False
    template: str | None = None
    unmanaged: bool = False


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
    checked, project_id = await submission.check_submission(
        pool, temporal, settings, body.config, body.template, body.projectId)
    config = checked.data
    # Determined fields kept but not acted on (common/expconf/); the CLIs print them.
    # `warnings` holds Determined's LaunchWarning values only (`det` refuses anything else).
    warnings = config_warnings(checked.model)
    if body.validateOnly:
        # Determined answers a validation with a placeholder experiment (`det e create --test`).
        return {
            "experiment": views.unsaved_experiment_json(config, body.config, owner or ""),
            "config": views.shown_config(config),
            "warnings": [],
            "configWarnings": warnings,
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
    experiment_id = await submission.submit(
        pool, temporal, checked, original_config=body.config, owner=owner,
        project_id=project_id, parent_id=body.parentId, model_definition=tgz, model_size=size,
        findable=request.app.state.findable, page_of=settings.experiment_page)
    row = await experiment_queries.fetch_experiment_row(pool, experiment_id)
    assert row is not None
    if not body.activate:
        await _signal(temporal, pool, experiment_id, ExperimentMessages.PAUSE)
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
    checked = await submission.checked_config(body.config, settings, unmanaged=True)
    project_id = await resolve_project(pool, body.projectId, checked.data)
    experiment_id = await submission.store_unmanaged(
        pool, checked, original_config=body.config, owner=owner, project_id=project_id,
        external_id=external_id)
    row = await _experiment_row(pool, experiment_id)
    return {"experiment": views.experiment_json(row), "config": views.shown_config(checked.data),
            "warnings": [], "configWarnings": []}


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
    if row["state"] not in TERMINAL_STATES or row["state"] == ExperimentState.DELETED:
        raise ApiError(409, f"experiment {experiment_id} is {row['state']}: only an ended"
                       " experiment can be continued")
    if row["unmanaged"]:
        raise ApiError(409, f"experiment {experiment_id} is unmanaged: its script runs outside "
                       "the cluster (run it again with the same external ids to resume it)")
    await submission.continue_experiment(
        pool, temporal, settings, row, body.overrideConfig,
        findable=request.app.state.findable, page=settings.experiment_page(experiment_id))
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
    search: str | None = Query(None, max_length=200),
) -> dict[str, Any]:
    """Determined's GetExperiments: every filter optional; `archived` omitted lists both.
    `search` (Epochal's) keeps experiments whose id, name, description or owner hold every
    word, so the page's total counts only those."""
    wanted = [s.removeprefix("STATE_") for s in states] if states else None
    require_choice("sortBy", sortBy, experiment_queries.EXPERIMENT_SORT_COLUMNS)
    limit = limit or 100  # Determined's client sends 0 for "the default"
    rows, total = await experiment_queries.fetch_experiment_rows(
        pool,
        where=experiment_queries.ExperimentFilter(
            states=wanted, archived=archived, name=name or None, description=description or None,
            labels=labels or None, users=users or None, user_ids=userIds or None,
            project_id=projectId or None, search=(search or "").strip() or None,
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
        await auth.require_owner(request, experiment_id, "change")
        await experiment_settings.change_resources(
            pool, temporal, experiment_id, priority=body.resources.priority,
            max_slots=body.resources.maxSlots, weight=body.resources.weight)
    if body.checkpointStorage is not None:
        await experiment_settings.change_gc_policy(pool, settings, experiment_id,
                                                   body.checkpointStorage.counts())
    await experiment_queries.update_experiment(
        pool, experiment_id, name=body.name, description=body.description,
        labels=None if body.labels is None else sorted(set(body.labels)), notes=body.notes)
    return {"experiment": views.experiment_json(await _experiment_row(pool, experiment_id))}


class RetainLogsRequest(BaseModel):
    """Determined's PutExperimentRetainLogs (`det experiment set log-retention ID --days N|
    --forever`)."""

    experimentId: int | None = None
    numDays: int = Field(ge=log_retention.FOREVER, le=log_retention.MAX_DAYS,
                         description="Days the logs are kept after each trial ends; -1: for ever")


@router.put("/experiments/{experiment_id}/retain_logs", **answers(Empty))
async def retain_experiment_logs(
    experiment_id: int, body: RetainLogsRequest, pool: Pool
) -> dict[str, Any]:
    """The log retention of every trial of the experiment, and of those it starts later
    (services/log_retention.py)."""
    if body.experimentId not in (None, experiment_id):
        raise ApiError(400, "experimentId does not match", [
            f"experimentId: is {body.experimentId}, but the path names {experiment_id}"])
    await log_retention.set_experiment_retention(pool, experiment_id, body.numDays)
    return {}


@router.delete("/experiments/{experiment_id}/tensorboard-files", **answers(Empty))
async def delete_tensorboard_files(
    experiment_id: int, pool: Pool, settings: AppSettings
) -> dict[str, Any]:
    """`det experiment delete-tb-files`: the TensorBoard files Determined's Core API uploaded
    beside the experiment's checkpoints go from its storage."""
    row = await _experiment_row(pool, experiment_id)
    await checkpoint_files.delete_tensorboard_files(row["config"], settings,
                                                    settings.cluster_id, experiment_id)
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
    """`det experiment move ID WORKSPACE PROJECT`: the experiment changes project; one still
    running must be able to keep using its pool in the new workspace."""
    if body.experimentId not in (None, experiment_id):
        raise ApiError(400, "experimentId does not match", [
            f"experimentId: is {body.experimentId}, but the path names {experiment_id}"])
    row = await _experiment_row(pool, experiment_id)
    project_id = await resolve_project(pool, body.destinationProjectId, {},
                                       "destinationProjectId")
    if row["state"] not in TERMINAL_STATES and not row["unmanaged"]:
        await pool_bindings.check_pool_usable(
            pool, await pool_bindings.workspace_of_project(pool, project_id),
            row["config"]["resources"]["resource_pool"], "destinationProjectId")
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
    await checkpoint_files.delete_experiment_files(row["config"], settings, experiment_id,
                                                   paths)
    await experiment_queries.delete_experiment(pool, experiment_id)
    return {}


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
