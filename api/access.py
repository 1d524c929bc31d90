"""Who may call each route: one table, checked before any route runs (`authorize`).

Every route of the API has one `Rule` here, keyed by method and path template; the app refuses
to start with a route that has none (api/app.py), and tests/integration/test_access.py calls
every route as every kind of caller and checks the answer against its rule. As on Determined,
users of the cluster read each other's work (experiments, trials, metrics, logs, models,
templates); what a user made (experiments, tasks, workspaces, projects, templates, models) only
they and admins change. Secrets and checkpoint files are never shared: configs are redacted
(common/expconf/redaction.py), and a checkpoint's files are read by its owner's (Rule.FILES).

A trial token acts for one run of one trial: it reads its own trial, experiment and allocation,
its owner's checkpoints and the cluster's facts, and writes its own trial's reports; nothing of
any other user's or trial's.
"""

from __future__ import annotations

import enum

from fastapi import Request

from api.errors import ApiError
from api.queries import owners, users

PREFIX = "/api/v1"
# The routes outside PREFIX (Determined serves `preview_gc` there).
UNVERSIONED = ("/health", "/info", "/experiments/{experiment_id}/preview_gc", "/task-logs",
               "/resources/allocation/raw", "/resources/allocation/aggregated",
               "/resources/allocation/allocations-csv")


class Rule(enum.Enum):
    """Who may call a route (admins may call every route but the agents' own)."""

    PUBLIC = "anyone, without a token"
    ANY = "any valid token (the cluster's facts, no user's work)"
    PERSON = "a user session, or a trial token (for the user it acts for); not agents"
    TEAM = ("users and agents read each other's work; a trial token only its own trial, "
            "experiment and allocation and its owner's checkpoints")
    FILES = ("a checkpoint's files: its owner, admins, agents and the trials of its owner "
             "(never shared with other users)")
    USER = "a user session (creating what the caller will own; routes check what bodies name)"
    OWNER = "the owner of what the path names, or an admin"
    SELF = "the user the path names, or an admin"
    ADMIN = "admins"
    AGENT = "agents (the cluster token), or an admin (who may register an agent by hand)"
    RUNS = "agents only: what starts a task's run (its launch, with its owner's session)"
    REPORT = "the trial's own token, the agents, the trial's owner or an admin"
    BODY = "any valid token; the route checks the trial or user its body names"


def _routes(rule: Rule, *keys: str) -> dict[tuple[str, str], Rule]:
    table = {}
    for key in keys:
        method, _, path = key.partition(" ")
        table[(method, path if path in UNVERSIONED else PREFIX + path)] = rule
    return table


RULES: dict[tuple[str, str], Rule] = {
    **_routes(Rule.PUBLIC, "POST /auth/login", "GET /master", "GET /health", "GET /info",
              "OPTIONS /temporal-codec/{action}"),
    **_routes(
        Rule.ANY,
        "GET /agents", "GET /agents/{agent_id}", "GET /agents/{agent_id}/slots",
        "GET /resource-pools", "GET /resource-pools/{pool_name}/workspace-bindings",
    ),
    **_routes(Rule.PERSON, "GET /me", "GET /master/cluster_message"),
    **_routes(Rule.FILES, "GET /checkpoints/{checkpoint_uuid}/files",
              "GET /checkpoints/{checkpoint_uuid}/download"),
    **_routes(
        Rule.TEAM,
        "GET /users", "GET /users/{username}/by-username", "GET /users/{user_id}",
        "GET /tasks", "GET /job-queues", "GET /job-queues-v2",
        "GET /experiments", "GET /experiments/{experiment_id}",
        "GET /experiments/{experiment_id}/trials", "GET /experiments/{experiment_id}/checkpoints",
        "GET /experiments/{experiment_id}/model_def", "GET /experiments/{experiment_id}/file_tree",
        "POST /experiments/{experiment_id}/file", "GET /experiments/{experiment_id}/logs",
        "GET /experiments/{experiment_id}/logs/stream", "GET /experiments/{experiment_id}/stream",
        "GET /experiments/{experiment_id}/hyperparameter-importance",
        "GET /experiments/{experiment_id}/searcher/best_searcher_validation_metric",
        "GET /experiments/{experiment_id}/preview_gc",
        "GET /trials/time-series", "GET /trials/metrics/trial_metrics", "GET /trials/{trial_id}",
        "GET /trials/{trial_id}/metrics",
        "GET /trials/{trial_id}/checkpoints", "GET /trials/{trial_id}/workloads",
        "GET /trials/{trial_id}/logs", "GET /trials/{trial_id}/logs/stream",
        "GET /allocations/{allocation_id}/signals/preemption",
        "GET /checkpoints/{checkpoint_uuid}",
        "GET /workspaces", "GET /workspaces/{workspace_id}",
        "GET /workspaces/{workspace_id}/available-resource-pools",
        "GET /workspaces/{workspace_id}/projects", "GET /projects/{project_id}",
        "GET /templates", "GET /templates/{name}",
        "GET /models", "GET /model/labels", "GET /models/{model_name}",
        "GET /models/{model_name}/versions", "GET /models/{model_name}/versions/{version}",
        "GET /models/{model_name}/versions/{version}/metrics",
        "GET /models/{model_name}/aliases", "GET /models/{model_name}/aliases/{alias}",
        "GET /commands", "GET /commands/{task_id}", "GET /notebooks", "GET /notebooks/{task_id}",
        "GET /shells", "GET /shells/{task_id}", "GET /tensorboards",
        "GET /tensorboards/{task_id}", "GET /tasks/{task_id}", "GET /tasks/{task_id}/logs",
        "GET /roles/workspace/{workspace_id}",
    ),
    **_routes(
        Rule.USER,
        "POST /auth/logout", "POST /experiments", "POST /experiments/continue",
        "POST /job-queues", "POST /workspaces", "POST /templates/{name}", "POST /models",
        "POST /commands", "POST /notebooks", "POST /shells", "POST /tensorboards",
        "POST /preview-hp-search", "DELETE /checkpoints",
        "PUT /experiments/by-external-id/{external_experiment_id}", "POST /trials", "PUT /trials",
        "GET /tokens", "POST /tokens",
    ),
    **_routes(
        Rule.OWNER,
        "POST /experiments/{experiment_id}/pause", "POST /experiments/{experiment_id}/activate",
        "POST /experiments/{experiment_id}/cancel", "POST /experiments/{experiment_id}/kill",
        "PATCH /experiments/{experiment_id}", "POST /experiments/{experiment_id}/move",
        "POST /experiments/{experiment_id}/archive", "POST /experiments/{experiment_id}/unarchive",
        "DELETE /experiments/{experiment_id}", "POST /trials/{trial_id}/kill",
        "POST /trials/{trial_id}/start", "PATCH /trials/{trial_id}",
        "PUT /experiments/{experiment_id}/retain_logs", "PUT /trials/{trial_id}/retain_logs",
        "DELETE /experiments/{experiment_id}/tensorboard-files",
        "PATCH /workspaces/{workspace_id}", "DELETE /workspaces/{workspace_id}",
        "POST /workspaces/{item_id}/archive", "POST /workspaces/{item_id}/unarchive",
        "POST /workspaces/{workspace_id}/projects",
        "PATCH /projects/{project_id}", "DELETE /projects/{project_id}",
        "POST /projects/{item_id}/archive", "POST /projects/{item_id}/unarchive",
        "PUT /templates/{name}", "PATCH /templates/{name}", "DELETE /templates/{name}",
        "PATCH /models/{model_name}", "POST /models/{model_name}/move",
        "POST /models/{model_name}/archive", "POST /models/{model_name}/unarchive",
        "DELETE /models/{model_name}", "POST /models/{model_name}/versions",
        "PATCH /models/{model_name}/versions/{version}",
        "DELETE /models/{model_name}/versions/{version}",
        "PUT /models/{model_name}/aliases/{alias}", "DELETE /models/{model_name}/aliases/{alias}",
        "POST /commands/{task_id}/kill", "POST /commands/{task_id}/set_priority",
        "POST /notebooks/{task_id}/kill", "POST /notebooks/{task_id}/set_priority",
        "POST /shells/{task_id}/kill", "POST /shells/{task_id}/set_priority",
        "POST /tensorboards/{task_id}/kill", "POST /tensorboards/{task_id}/set_priority",
        "PATCH /tokens/{token_id}",
    ),
    **_routes(Rule.SELF, "PATCH /users/{user_id}", "POST /users/{user_id}/password"),
    **_routes(Rule.ADMIN, "POST /users", "POST /agents/{agent_id}/enable",
              "POST /cleanup_logs",
              "POST /agents/{agent_id}/disable", "POST /agents/{agent_id}/slots/{slot_id}/enable",
              "POST /agents/{agent_id}/slots/{slot_id}/disable",
              "POST /resource-pools/{pool_name}/workspace-bindings",
              "DELETE /resource-pools/{pool_name}/workspace-bindings",
              "PUT /resource-pools/{pool_name}/workspace-bindings",
              "POST /temporal-codec/decode",
              "POST /temporal-codec/encode", "GET /master/config", "GET /master/logs",
              "PUT /master/cluster_message", "DELETE /master/cluster_message",
              # Who used what (Determined's CanGetUsageDetails): the allocation history, as
              # CSV here and as JSON under PREFIX (below).
              "GET /resources/allocation/raw", "GET /resources/allocation/aggregated",
              "GET /resources/allocation/allocations-csv",
              # Importing a Determined cluster's history (api/routes/imports.py).
              "POST /imports", "GET /imports/{source_id}/objects", "POST /imports/{source_id}/done",
              "POST /imports/{source_id}/{kind}",
              "POST /imports/{source_id}/trials/{external_trial_id}/metrics",
              "POST /imports/{source_id}/trials/{external_trial_id}/logs"),
    **{("GET", PREFIX + path): Rule.ADMIN
       for path in ("/resources/allocation/raw", "/resources/allocation/aggregated")},
    **_routes(Rule.AGENT, "PUT /agents/{agent_id}"),
    **_routes(Rule.RUNS, "GET /tasks/{task_id}/launch", "GET /tasks/{task_id}/context",
              "POST /tasks/{task_id}/ready"),
    **_routes(
        Rule.REPORT,
        "POST /trials/{trial_id}/metrics", "POST /trials/{trial_id}/metrics/batch",
        "POST /trials/{trial_id}/progress", "POST /trials/{trial_id}/early_exit",
        "POST /trials/{trial_id}/runner/metadata", "POST /trials/{trial_id}/user-session",
        "POST /allocations/{allocation_id}/signals/ack_preemption",
    ),
    **_routes(
        Rule.BODY,
        "POST /checkpoints", "PATCH /checkpoints", "POST /checkpoints/{checkpoint_uuid}/upload",
        "POST /checkpoints/{checkpoint_uuid}/upload/complete", "POST /task/logs",
        "POST /task-logs",
        "POST /runs/start",
    ),
}


# Writes by method that only read, which Temporal's UI makes from the browser with the
# dashboard's cookie (every other write needs the Authorization header: no cross-site forgery).
COOKIE_POSTS = frozenset({("POST", PREFIX + "/temporal-codec/decode")})


def rule_of(method: str, path: str) -> Rule | None:
    return RULES.get(("GET" if method == "HEAD" else method, path))


def _int(value: object) -> int | None:
    text = str(value)
    return int(text) if text.isdigit() else None


def trial_named(params: dict[str, object]) -> int | None:
    """The trial a path names: `{trial_id}`, or the middle of `{allocation_id}`
    (`<experiment>.<trial>.<run>`)."""
    if "trial_id" in params:
        return _int(params["trial_id"])
    if "allocation_id" in params:
        parts = str(params["allocation_id"]).split(".")
        return _int(parts[1]) if len(parts) >= 2 else None
    return None


async def owner_named(request: Request) -> str | None:
    """The owner of what the path names (None: nothing by that name, the route says so)."""
    pool = request.app.state.pool
    params = request.path_params
    path = str(getattr(request.scope.get("route"), "path", ""))
    if "checkpoint_uuid" in params:
        return await owners.checkpoint_owner(pool, str(params["checkpoint_uuid"]))
    if "task_id" in params:
        return await owners.task_owner(pool, str(params["task_id"]))
    if "token_id" in params:
        number = _int(params["token_id"])
        return None if number is None else await users.access_token_owner(pool, number)
    if "model_name" in params:
        return await owners.model_owner(pool, str(params["model_name"]))
    if "name" in params:
        return await owners.template_owner(pool, str(params["name"]))
    if "experiment_id" in params:
        number = _int(params["experiment_id"])
        return None if number is None else await owners.experiment_owner(pool, number)
    if "trial_id" in params or "allocation_id" in params:
        trial_id = trial_named(params)
        return None if trial_id is None else await owners.trial_owner(pool, trial_id)
    for param in ("workspace_id", "project_id", "item_id"):  # item: /workspaces|projects/{id}
        if param in params:
            number = _int(params[param])
            if number is None:
                return None
            if param == "project_id" or path.startswith(PREFIX + "/projects/"):
                return await owners.project_owner(pool, number)
            return await owners.workspace_owner(pool, number)
    raise ApiError(500, f"no owner is known for what {path} names")


async def trial_may_read(request: Request, trial_id: int) -> bool:
    """Whether a trial token may read what the path names: its own trial, allocation and
    experiment, and checkpoints of its experiment's owner (a run may start from another of
    their experiments' checkpoints)."""
    pool = request.app.state.pool
    params = request.path_params
    named_trial = trial_named(params)
    if named_trial is not None:
        return named_trial == trial_id
    if "experiment_id" in params:
        return _int(params["experiment_id"]) == await owners.trial_experiment(pool, trial_id)
    if "checkpoint_uuid" in params:
        return await trial_may_read_files(request, trial_id)
    return False


async def trial_may_read_files(request: Request, trial_id: int) -> bool:
    """A trial reads the checkpoint the path names if its own owner's (to start from it)."""
    pool = request.app.state.pool
    owner = await owners.checkpoint_owner(pool, str(request.path_params["checkpoint_uuid"]))
    return owner is None or owner == await owners.trial_owner(pool, trial_id)
