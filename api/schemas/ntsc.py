"""Interactive tasks (Determined's NTSC: commands, notebooks, shells, TensorBoards): each kind's
item, its answers (`KIND_ANSWERS`), the task behind it and its launch for agents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import create_model

from api.schemas import Answer, Pagination
from api.schemas.users import User


class TaskItem(Answer):
    """What Determined's v1Command, v1Notebook, v1Shell and v1Tensorboard share."""

    id: str
    description: str
    state: str  # STATE_QUEUED ... STATE_TERMINATED
    startTime: str
    username: str
    userId: int
    workspaceId: int
    resourcePool: str
    jobId: str
    exitStatus: str | None
    workflowId: str | None = None  # its workflow in Temporal (Epochal's)


class Command(TaskItem):
    """Determined's v1Command."""


class Notebook(TaskItem):
    """Determined's v1Notebook: `serviceAddress` is its path on the master (the proxy)."""

    serviceAddress: str


class Shell(TaskItem):
    """Determined's v1Shell; the key pair only for its owner and admins."""

    agentUserGroup: dict[str, Any]
    addresses: list[dict[str, Any]]
    publicKey: str | None = None
    privateKey: str | None = None


class Tensorboard(TaskItem):
    """Determined's v1Tensorboard."""

    serviceAddress: str
    experimentIds: list[int]
    trialIds: list[int]


@dataclass(frozen=True)
class KindAnswers:
    """One kind's answers, as Determined names them: `{"command": ..., "config": ...}` and so
    on."""

    launched: type[Answer]  # v1Launch<Kind>Response
    one: type[Answer]  # v1Get<Kind>Response
    listed: type[Answer]  # v1Get<Kind>sResponse
    changed: type[Answer]  # v1Kill<Kind>Response, v1Set<Kind>PriorityResponse


def _answers(name: str, key: str, plural: str, item: type[TaskItem]) -> KindAnswers:
    changed: dict[str, Any] = {key: (item, ...)}
    one: dict[str, Any] = {**changed, "config": (dict[str, Any], ...)}
    launched: dict[str, Any] = {**one, "warnings": (list[str], ...),
                                "configWarnings": (list[str], ...)}
    listed: dict[str, Any] = {plural: (list[item], ...),  # type: ignore[valid-type]
                              "pagination": (Pagination, ...)}
    return KindAnswers(
        launched=create_model(f"{name}Launched", __base__=Answer, **launched),
        one=create_model(f"{name}Answer", __base__=Answer, **one),
        listed=create_model(f"{name}List", __base__=Answer, **listed),
        changed=create_model(f"{name}Changed", __base__=Answer, **changed),
    )


KIND_ANSWERS = {
    "COMMAND": _answers("Command", "command", "commands", Command),
    "NOTEBOOK": _answers("Notebook", "notebook", "notebooks", Notebook),
    "SHELL": _answers("Shell", "shell", "shells", Shell),
    "TENSORBOARD": _answers("Tensorboard", "tensorboard", "tensorboards", Tensorboard),
}


class TaskAllocation(Answer):
    """Determined's v1Allocation: a task runs once, as its one allocation."""

    allocationId: str
    taskId: str
    slots: int
    state: str
    isReady: bool
    startTime: str | None
    endTime: str | None
    exitReason: str | None


class Task(Answer):
    """Determined's v1Task (`det notebook start` waits on `isReady`, `open` checks `endTime`)."""

    taskId: str
    taskType: str  # TASK_TYPE_COMMAND ...
    startTime: str
    endTime: str | None
    allocations: list[TaskAllocation]


class TaskAnswer(Answer):
    """Determined's v1GetTaskResponse."""

    task: Task


class TaskLaunch(Answer):
    """What an agent needs to start a task (agents only: it holds the task's secrets and a
    session of its owner for the task's code)."""

    taskId: str
    taskType: str  # COMMAND, NOTEBOOK, SHELL or TENSORBOARD
    config: dict[str, Any]
    secret: str
    publicKey: str | None
    username: str
    owner: User  # who the task is on its agent (agent_worker/sandbox.py)
    userToken: str
    experimentIds: list[int]
    trialIds: list[int]
    hasContext: bool
