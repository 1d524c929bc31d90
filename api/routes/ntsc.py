"""Interactive tasks as Determined's API has them: commands, notebooks, shells and TensorBoards
(`/api/v1/{commands,notebooks,shells,tensorboards}`), the task behind each (`/api/v1/tasks/{id}`
and its logs), and the agents' side of one: its launch, its files, and that it is ready.

A launch stores the task's row (the config validated and normalized, its files as a .tar.gz, a
secret for its service, a shell's key pair) and then starts its TaskWorkflow (workflows/task.py),
which asks the task's pool for slots, runs it on an agent and records its states; if Temporal
refuses, the row is deleted. A kill is the workflow's `kill` signal; a task whose workflow is gone
is marked TERMINATED here. Every user may list and read tasks; only the owner or an admin may kill
one or change its priority.
"""

from __future__ import annotations

import asyncio
import logging
import re
import textwrap
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import AliasChoices, BaseModel, Field, field_validator

from api import auth, views
from api.deps import AppSettings, Pool, Temporal
from api.errors import ApiError, not_found, require_choice
from api.log_stream import LogFilter, log_records, ndjson_lines, task_ended, trial_log_stream
from api.model_definition import build_tarball
from api.queries import logs as log_queries
from api.queries import tasks as task_queries
from api.queries import users as user_queries
from api.queries import workspaces as workspace_queries
from api.schemas import Empty, ModelFile, answers
from api.schemas.ntsc import KIND_ANSWERS, TaskAnswer, TaskLaunch
from api.settings import Settings
from common.expconf import (
    TaskConfig,
    task_config_warnings,
)
from common.states import TaskState
from common.temporal_names import (
    task_allocation_id,
    task_workflow_id,
)
from services import pools, tasks
from services.templates import merge_under, template_config
from services.workspaces import DEFAULT_PROJECT_ID

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1", tags=["tasks"])

# The session a task's code runs with (DET_USER_TOKEN); revoked when the task ends.
TASK_SESSION_TTL = timedelta(days=7)
MAX_LISTED = 10_000
MAX_SOURCES = 100  # a TensorBoard's experiments, and its trials
LOG_BATCH = 1000
TRIAL_TASK = re.compile(r"^(\d+)\.(\d+)$")  # a trial's task id, EXP.TRIAL


@dataclass(frozen=True)
class Kind:
    """A kind of task as the API names it: its type, its routes' path and its answers' key."""

    task_type: str
    path: str
    key: str
    title: str  # what its default description says it is


KINDS = (
    Kind("COMMAND", "commands", "command", "Command"),
    Kind("NOTEBOOK", "notebooks", "notebook", "JupyterLab"),
    Kind("SHELL", "shells", "shell", "Shell"),
    Kind("TENSORBOARD", "tensorboards", "tensorboard", "TensorBoard"),
)
SERVED_TYPES = frozenset({"NOTEBOOK", "TENSORBOARD"})  # reached at /proxy/<id>/ over HTTP


def task_item_json(row: Mapping[str, Any], keys: Mapping[str, Any] | None = None
                   ) -> dict[str, Any]:
    """Determined's v1Command, v1Notebook, v1Shell or v1Tensorboard of a task's row; a shell's
    key pair only when `keys` is given (its owner's and admins' answers)."""
    task_id, task_type = row["id"], row["task_type"]
    item: dict[str, Any] = {
        "id": task_id, "description": row["description"], "state": f"STATE_{row['state']}",
        "startTime": views.rfc3339(row["created_at"]), "username": row["username"],
        "userId": row["owner_id"], "workspaceId": row["workspace_id"],
        "resourcePool": row["resource_pool"], "jobId": task_id,
        "exitStatus": row["exit_status"],
        "workflowId": task_workflow_id(task_id),  # Epochal's: its workflow in Temporal
    }
    if task_type in SERVED_TYPES:
        item["serviceAddress"] = f"/proxy/{task_id}/"
    if task_type == "TENSORBOARD":
        item["experimentIds"] = list(row["experiment_ids"])
        item["trialIds"] = list(row["trial_ids"])
    if task_type == "SHELL":
        # `det shell open` logs in as this user ("root" when none is named): its sshd's.
        item["agentUserGroup"] = {"user": row["agent_user"]}
        item["addresses"] = []
        if keys is not None:
            item["publicKey"], item["privateKey"] = keys["public_key"], keys["private_key"]
    return item


def task_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """Determined's v1Task: the task and its one allocation."""
    state, ended = f"STATE_{row['state']}", views.rfc3339(row["ended_at"])
    return {
        "taskId": row["id"], "taskType": f"TASK_TYPE_{row['task_type']}",
        "startTime": views.rfc3339(row["created_at"]), "endTime": ended,
        "allocations": [{
            "allocationId": task_allocation_id(row["id"]), "taskId": row["id"],
            "slots": row["slots"], "state": state, "isReady": row["ready"],
            "startTime": views.rfc3339(row["started_at"]), "endTime": ended,
            "exitReason": row["exit_status"],
        }],
    }


# -- launching -------------------------------------------------------------------------------

class LaunchRequest(BaseModel):
    """Determined's v1Launch{Command,Notebook,Shell,Tensorboard}Request."""

    config: dict[str, Any] | None = None
    # The files of --context and --include, as Determined's list of v1File.
    files: list[ModelFile] = Field(default_factory=list, max_length=100_000)
    # `det cmd run` and `det shell start` send it as template_name.
    templateName: str | None = Field(
        None, max_length=256, validation_alias=AliasChoices("templateName", "template_name"))
    workspaceId: int | None = None
    preview: bool = False  # a notebook's: answer the config, start nothing
    experimentIds: list[int] = Field(default_factory=list, max_length=MAX_SOURCES)
    trialIds: list[int] = Field(default_factory=list, max_length=MAX_SOURCES)
    filters: dict[str, Any] | None = None

    @field_validator("files", "experimentIds", "trialIds", mode="before")
    @classmethod
    def _null_is_none(cls, value: Any) -> Any:
        """Determined's client sends null for a list it has nothing for."""
        return [] if value is None else value


def _misplaced_fields(kind: Kind, body: LaunchRequest) -> list[str]:
    given = {
        "preview": body.preview and kind.task_type != "NOTEBOOK",
        "experimentIds": bool(body.experimentIds) and kind.task_type != "TENSORBOARD",
        "trialIds": bool(body.trialIds) and kind.task_type != "TENSORBOARD",
        "filters": body.filters is not None,
    }
    return ["filters: not supported by Epochal; list the experiments in experimentIds"
            if name == "filters" else f"{name}: a {kind.key} does not take it"
            for name, wrong in given.items() if wrong]


async def _workspace_id(pool: Pool, workspace_id: int | None) -> int:
    """The workspace a task goes to: the request's, else the default project's."""
    if workspace_id is None:
        project = await workspace_queries.fetch_project(pool, DEFAULT_PROJECT_ID)
        assert project is not None  # migration 0007 made it, and nothing deletes it
        return int(project["workspace_id"])
    row = await workspace_queries.fetch_workspace(pool, workspace_id)
    if row is None:
        raise ApiError(400, f"workspace {workspace_id} not found",
                       [f"workspaceId: no workspace has id {workspace_id}"])
    if row["archived"]:
        raise ApiError(400, f"workspace {row['name']!r} is archived",
                       [f"workspaceId: workspace {workspace_id} is archived; unarchive it first"])
    return workspace_id


async def _check_sources(pool: Pool, body: LaunchRequest) -> None:
    """A TensorBoard's experiments and trials: some, and every one there."""
    if not body.experimentIds and not body.trialIds:
        raise ApiError(400, "a TensorBoard needs experiments or trials to show",
                       ["experimentIds: give experiment ids, or trial ids in trialIds"])
    problems = []
    sources: tuple[tuple[str, Literal["experiments", "trials"], list[int]], ...] = (
        ("experimentIds", "experiments", body.experimentIds),
        ("trialIds", "trials", body.trialIds))
    for field, table, ids in sources:
        missing = await task_queries.fetch_missing_ids(pool, table, ids)
        problems += [f"{field}: no {table[:-1]} has id {i}" for i in missing]
    if problems:
        raise ApiError(400, "a TensorBoard's experiments and trials must exist", problems)


def _default_description(kind: Kind, task_id: str, config: dict[str, Any],
                         body: LaunchRequest) -> str:
    if kind.task_type == "COMMAND":
        return f"Command {textwrap.shorten(config['entrypoint'], 60, placeholder='...')}"
    if kind.task_type == "TENSORBOARD":
        sources = [f"experiment {i}" for i in body.experimentIds]
        sources += [f"trial {i}" for i in body.trialIds]
        return f"TensorBoard ({textwrap.shorten(', '.join(sources), 60, placeholder='...')})"
    return f"{kind.title} ({task_id[:8]})"


async def _context(files: list[ModelFile], settings: Settings) -> bytes | None:
    """The task's files as one .tar.gz (None without files), within the model definition's
    bound."""
    if not files:
        return None
    limit = settings.max_model_definition_bytes
    try:
        tgz, _ = await asyncio.to_thread(build_tarball, [f.model_dump() for f in files], limit)
    except ApiError as err:
        if err.status == 413:
            raise ApiError(413, f"the task's files are over the limit of {limit / 2**20:.0f} MiB;"
                           " leave large files out (.detignore)",
                           [f"files: at most {limit:,} bytes"]) from None
        raise ApiError(err.status, err.message.replace("modelDefinition", "files"),
                       [d.replace("modelDefinition", "files") for d in err.details]) from None
    return tgz


async def _launch(kind: Kind, body: LaunchRequest, request: Request, pool: Pool,
                  temporal: Temporal, settings: Settings) -> dict[str, Any]:
    principal = auth.require_user(auth.current(request), f"launch {kind.path}")
    misplaced = _misplaced_fields(kind, body)
    if misplaced:
        raise ApiError(400, f"invalid {kind.key} request", misplaced)
    data = body.config or {}
    if body.templateName:
        template = await template_config(pool, body.templateName)
        data = merge_under(data, tasks.template_part(template, kind.task_type))
    config = await asyncio.to_thread(tasks.normalized_task_config, data, kind.task_type,
                                     kind.key, settings.allowed_storage_roots())
    workspace_id = await _workspace_id(pool, body.workspaceId)
    await tasks.place_task(pool, config, data, workspace_id)
    if kind.task_type == "TENSORBOARD":
        await _check_sources(pool, body)
    resources = config["resources"]
    too_big = await pools.never_fits(temporal, {"resource_pool": resources["resource_pool"],
                                                "slots_per_trial": resources["slots"]})
    if too_big is not None:
        raise ApiError(400, f"invalid {kind.key} config", [f"resources.slots: {too_big}"])
    task_id = str(uuid.uuid4())
    config["description"] = config["description"] or _default_description(
        kind, task_id, config, body)
    warnings = task_config_warnings(TaskConfig.model_validate(config))
    if body.preview:
        unsaved = {"id": task_id, "task_type": kind.task_type, "description":
                   config["description"], "state": TaskState.QUEUED,
                   "created_at": datetime.now(UTC),
                   "username": principal.username, "owner_id": principal.user_id,
                   "workspace_id": workspace_id, "resource_pool": resources["resource_pool"],
                   "exit_status": None}
        return {kind.key: task_item_json(unsaved), "config": config, "warnings": [],
                "configWarnings": warnings}
    context = await _context(body.files, settings)
    keys = tasks.shell_keys() if kind.task_type == "SHELL" else None
    assert principal.user_id is not None
    await tasks.launch(
        pool, temporal, task_id=task_id, task_type=kind.task_type, what=kind.key,
        owner_id=principal.user_id, owner=principal.username or "", workspace_id=workspace_id,
        config=config, context=context, keys=keys, experiment_ids=body.experimentIds,
        trial_ids=body.trialIds, findable=request.app.state.findable)
    row = await task_queries.fetch_task(pool, task_id)
    assert row is not None
    public_key, private_key = keys if keys is not None else (None, None)
    item = task_item_json(row, {"public_key": public_key, "private_key": private_key})
    return {kind.key: item, "config": config, "warnings": [], "configWarnings": warnings}


# -- each kind's routes ----------------------------------------------------------------------

async def _task_of_kind(pool: Pool, kind: Kind, task_id: uuid.UUID) -> Any:
    row = await task_queries.fetch_task(pool, str(task_id))
    if row is None or row["task_type"] != kind.task_type:
        raise not_found(kind.key, task_id)
    return row


def _owns(principal: auth.Principal, row: Mapping[str, Any]) -> bool:
    return principal.kind == "user" and (principal.admin or principal.user_id == row["owner_id"])


async def _item(pool: Pool, principal: auth.Principal, row: Mapping[str, Any]) -> dict[str, Any]:
    """The task's item as `principal` may see it (a shell's keys only for its owner and
    admins)."""
    keys = None
    if row["task_type"] == "SHELL" and _owns(principal, row):
        keys = await task_queries.fetch_shell_keys(pool, row["id"])
    return task_item_json(row, keys)


class PriorityRequest(BaseModel):
    """Determined's v1Set{Command,Notebook,Shell,Tensorboard}PriorityRequest."""

    priority: int = Field(ge=1, le=99)


def _kind_routes(kind: Kind) -> None:
    kind_answers = KIND_ANSWERS[kind.task_type]
    item_path = f"/{kind.path}/{{task_id}}"

    async def launch(body: LaunchRequest, request: Request, pool: Pool, temporal: Temporal,
                     settings: AppSettings) -> dict[str, Any]:
        return await _launch(kind, body, request, pool, temporal, settings)

    async def list_of_kind(
        pool: Pool,
        users: views.ListQuery = None,
        userIds: Annotated[list[int] | None, Query(max_length=MAX_SOURCES)] = None,  # noqa: N803
        workspaceId: int | None = None,  # noqa: N803
        limit: int = Query(0, ge=0),
        offset: int = Query(0, ge=0),
        sortBy: str = "SORT_BY_START_TIME",  # noqa: N803
        orderBy: views.OrderBy = "ORDER_BY_ASC",  # noqa: N803
    ) -> dict[str, Any]:
        sort_keys = {"SORT_BY_UNSPECIFIED": "startTime", "SORT_BY_ID": "id",
                     "SORT_BY_DESCRIPTION": "description", "SORT_BY_START_TIME": "startTime",
                     "SORT_BY_WORKSPACE_ID": "workspaceId"}
        require_choice("sortBy", sortBy, sort_keys)
        names = list(users or [])
        for user_id in userIds or []:
            user = await user_queries.fetch_user(pool, user_id)
            names += [user["username"]] if user is not None else []
        rows = await task_queries.fetch_tasks(
            pool, task_type=kind.task_type, usernames=names if users or userIds else None,
            workspace_id=workspaceId, limit=MAX_LISTED)
        items = [task_item_json(r) for r in rows]
        items.sort(key=lambda i: i[sort_keys[sortBy]], reverse=orderBy == "ORDER_BY_DESC")
        page = items[offset:offset + limit] if limit else items[offset:]
        return {kind.path: page,
                "pagination": views.pagination(offset, limit or len(items), len(page),
                                               len(items))}

    async def get_one(task_id: uuid.UUID, request: Request, pool: Pool) -> dict[str, Any]:
        row = await _task_of_kind(pool, kind, task_id)
        return {kind.key: await _item(pool, auth.current(request), row), "config": row["config"]}

    async def kill(task_id: uuid.UUID, request: Request, pool: Pool,
                   temporal: Temporal) -> dict[str, Any]:
        """Stop the task (nothing to do once it is over)."""
        row = await _task_of_kind(pool, kind, task_id)  # its owner or an admin: api/access.py
        if row["state"] != TaskState.TERMINATED:
            await tasks.kill_task(pool, temporal, row["id"])
            row = await _task_of_kind(pool, kind, task_id)
        return {kind.key: await _item(pool, auth.current(request), row)}

    async def set_priority(task_id: uuid.UUID, body: PriorityRequest, request: Request,
                           pool: Pool) -> dict[str, Any]:
        """The task's priority, for its next request for slots (a waiting request keeps its
        place)."""
        row = await _task_of_kind(pool, kind, task_id)  # its owner or an admin: api/access.py
        if not await task_queries.set_task_priority(pool, row["id"], body.priority):
            raise ApiError(409, f"{kind.key} {task_id} is over: its priority no longer matters")
        row = await _task_of_kind(pool, kind, task_id)
        return {kind.key: await _item(pool, auth.current(request), row)}

    for function, name in ((launch, "launch"), (list_of_kind, "list"), (get_one, "get"),
                           (kill, "kill"), (set_priority, "set_priority")):
        function.__name__ = f"{name}_{kind.key}"
    router.post(f"/{kind.path}", **answers(kind_answers.launched))(launch)
    router.get(f"/{kind.path}", **answers(kind_answers.listed))(list_of_kind)
    router.get(item_path, **answers(kind_answers.one))(get_one)
    router.post(f"{item_path}/kill", **answers(kind_answers.changed))(kill)
    router.post(f"{item_path}/set_priority", **answers(kind_answers.changed))(set_priority)


for _kind in KINDS:
    _kind_routes(_kind)


# -- the task behind each, and its logs -------------------------------------------------------

async def _task_row(pool: Pool, task_id: str) -> Any:
    row = await task_queries.fetch_task(pool, task_id)
    if row is None:
        raise not_found("task", task_id)
    return row


@router.get("/tasks/{task_id}", **answers(TaskAnswer))
async def get_task(task_id: str, pool: Pool) -> dict[str, Any]:
    """Determined's GetTask of an interactive task."""
    return {"task": task_json(await _task_row(pool, task_id))}


def _task_log_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """Determined's TaskLog: a log line with the allocation it came from."""
    return {**views.log_json(row), "allocationId": row["allocation_id"]}


async def _newest_first(pool: Pool, task_id: str) -> AsyncIterator[dict[str, Any]]:
    """The task's lines backwards, in batches (never followed)."""
    before_id = 0
    while True:
        rows = await log_queries.fetch_task_lines_newest_first(pool, task_id, before_id,
                                                               LOG_BATCH)
        for row in rows:
            yield _task_log_json(row)
        if len(rows) < LOG_BATCH:
            return
        before_id = rows[-1]["id"]


@router.get("/tasks/{task_id}/logs")
async def task_logs(
    task_id: str,
    pool: Pool,
    follow: bool = False,
    limit: int = Query(0, ge=0),
    orderBy: views.OrderBy = "ORDER_BY_ASC",  # noqa: N803
    levels: views.ListQuery = None,
    stdtypes: views.ListQuery = None,
    agentIds: views.ListQuery = None,  # noqa: N803
    allocationIds: views.ListQuery = None,  # noqa: N803
    containerIds: views.ListQuery = None,  # noqa: N803
    rankIds: Annotated[list[int] | None, Query()] = None,  # noqa: N803
    sources: views.ListQuery = None,
    searchText: str | None = Query(None, max_length=1000),  # noqa: N803
    enableRegex: bool = False,  # noqa: N803
    timestampAfter: datetime | None = None,  # noqa: N803
    timestampBefore: datetime | None = None,  # noqa: N803
) -> StreamingResponse:
    """Determined's TaskLogs (`det task logs`, `det cmd run`): NDJSON `{"result": TaskLog}`
    lines. `limit` with orderBy DESC is `--tail N` (newest first). A trial's task id
    (`EXP.TRIAL`) answers the trial's logs."""
    if enableRegex:
        raise ApiError(400, "regular expressions are not supported",
                       ["enableRegex: searchText matches literally in Epochal"])
    after = timestampAfter.astimezone(UTC).isoformat() if timestampAfter else None
    before = timestampBefore.astimezone(UTC).isoformat() if timestampBefore else None
    trial = TRIAL_TASK.match(task_id)
    if trial is not None:
        await views.require_trial(pool, int(trial.group(2)))
    else:
        await _task_row(pool, task_id)
    keep = LogFilter(
        levels={views.log_level(v) for v in levels} if levels else None,
        stdtypes=set(stdtypes) if stdtypes else None,
        agent_ids=set(agentIds) if agentIds else None,
        search_text=searchText or None, after=after, before=before)
    if trial is not None:
        return await trial_log_stream(pool, int(trial.group(2)), keep, follow=follow,
                                      limit=limit, newest_first=orderBy == "ORDER_BY_DESC")
    only = {"allocationId": allocationIds, "containerId": containerIds, "rankId": rankIds,
            "source": sources}

    def keeps(log: dict[str, Any]) -> bool:
        return keep.keeps(log) and not any(
            wanted and log.get(field) not in wanted for field, wanted in only.items())

    records = (_newest_first(pool, task_id) if orderBy == "ORDER_BY_DESC" else log_records(
        pool, log_queries.OF_TASK, task_id, follow=follow, is_done=task_ended(pool, task_id),
        to_json=_task_log_json))
    return StreamingResponse(ndjson_lines(records, keeps, limit),
                             media_type="application/x-ndjson")


# -- the agents' side -------------------------------------------------------------------------

@router.get("/tasks/{task_id}/launch", **answers(TaskLaunch))
async def task_launch(task_id: str, request: Request, pool: Pool) -> dict[str, Any]:
    """What the agent granted the task's slots starts. Each fetch mints a new session of the
    task's owner for the task's code (DET_USER_TOKEN) and revokes the one it replaces."""
    row = await task_queries.fetch_task_launch(pool, task_id)
    if row is None:
        raise not_found("task", task_id)
    if row["state"] == TaskState.TERMINATED:
        raise ApiError(409, f"task {task_id} is over: it is not launched again")
    token = await auth.open_run_session(pool, row["owner_id"], TASK_SESSION_TTL, "tasks",
                                        task_id)
    now = await task_queries.fetch_task_owner(pool, task_id)
    if now is None or now["state"] == TaskState.TERMINATED:  # it ended meanwhile: nobody revokes it
        await user_queries.delete_session(pool, auth._digest(token))
        raise ApiError(409, f"task {task_id} is over: it is not launched again")
    owner = await user_queries.fetch_user(pool, row["owner_id"])
    return {
        "taskId": row["id"], "taskType": row["task_type"], "config": row["config"],
        "secret": row["secret"], "publicKey": row["public_key"], "username": row["username"],
        "owner": views.user_json(owner),  # who the task is on its agent (agent_worker/sandbox.py)
        "userToken": token, "experimentIds": list(row["experiment_ids"]),
        "trialIds": list(row["trial_ids"]), "hasContext": row["has_context"],
    }


@router.get("/tasks/{task_id}/context", response_class=Response)
async def task_context(task_id: str, request: Request, pool: Pool) -> Response:
    """The task's files (--context, --include) as a .tar.gz."""
    context = await task_queries.fetch_task_context(pool, task_id)
    if context is None:
        raise ApiError(404, f"task {task_id} has no files (or does not exist)")
    return Response(context, media_type="application/gzip")


class ReadyRequest(BaseModel):
    # Where the task's service listens (host:port on its agent); null for a command.
    proxyAddress: str | None = Field(None, max_length=300,
                                     pattern=r"^[A-Za-z0-9.\-\[\]:%]+:[0-9]{1,5}$")
    user: str | None = Field(None, max_length=64)  # who the task runs as, on its agent


@router.post("/tasks/{task_id}/ready", **answers(Empty))
async def task_ready(task_id: str, body: ReadyRequest, request: Request,
                     pool: Pool, temporal: Temporal) -> dict[str, Any]:
    """The agent says the task's service answers (the proxy forwards to it from now on)."""
    await _task_row(pool, task_id)
    if not await task_queries.set_task_ready(pool, task_id, body.proxyAddress, body.user):
        raise ApiError(409, f"task {task_id} is over: it cannot be ready")
    await tasks.tell_task_running(temporal, task_id)
    return {}
