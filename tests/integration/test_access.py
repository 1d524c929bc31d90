"""Every route of the API called by every kind of caller, against the live master.

The routes come from the app itself and each must have its rule in api/access.py, so a new route
without one fails here (and the app refuses to start). Each caller kind is a real principal: no
token, the owner of what the path names (user A), another user (B), an admin, the token of A's
own trial, the token of B's trial, and an agent (the cluster token). A refused call answers 401
or 403 before the route runs; an allowed one gets any other answer (bodies here are empty, so
400 and 422 are common: what matters is that the rule let it through).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fastapi.routing import APIRoute
from temporalio import activity
from temporalio.common import RawValue
from temporalio.worker import Worker

from agent_worker.liveness import Liveness
from api import access
from api.access import Rule
from api.app import API_MODULES, create_app
from api.auth import open_session
from api.settings import Settings
from common.temporal_names import agent_task_queue
from common.tokens import mint_trial_token
from tests.integration.test_api import create, serve_pool, wait_for_trials
from tests.master_fixtures import LiveMaster

CALLERS = ("anonymous", "other", "owner", "admin", "own_trial", "others_trial", "agent")
# Callers last in a route's turn, and routes last of all: what ends runs or removes things.
ENDING = re.compile(r"/early_exit$|^DELETE |/archive$|/logout$")
STOPPING = re.compile(r"/(kill|cancel|pause)$")  # last of all: they end the trial's run
# A trial token reads what names its own trial, allocation, experiment or owner's checkpoint.
TRIAL_SCOPED = ("{trial_id}", "{allocation_id}", "{experiment_id}", "{checkpoint_uuid}")


def allowed(rule: Rule, caller: str, path: str) -> bool:
    """Who the rule lets call, in words independent of api/auth.py's code."""
    users = {"owner", "other", "admin"}
    if rule is Rule.PUBLIC:
        return True
    if rule in (Rule.ANY, Rule.BODY):
        return caller != "anonymous"
    if rule is Rule.PERSON:
        return caller in users | {"own_trial", "others_trial"}
    if rule is Rule.FILES:
        return caller in {"owner", "admin", "agent", "own_trial"}
    if rule is Rule.TEAM:
        if caller == "own_trial":
            return any(param in path for param in TRIAL_SCOPED)
        return caller in users | {"agent"}
    if rule is Rule.USER:
        return caller in users
    if rule in (Rule.OWNER, Rule.SELF):
        return caller in {"owner", "admin"}
    if rule is Rule.ADMIN:
        return caller == "admin"
    if rule is Rule.AGENT:
        return caller in {"agent", "admin"}
    if rule is Rule.RUNS:
        return caller == "agent"
    assert rule is Rule.REPORT
    return caller in {"own_trial", "agent", "owner", "admin"}


def api_routes() -> list[tuple[str, str]]:
    """(method, path) of every route the app serves behind `authorize`."""
    return sorted((method, route.path) for module in API_MODULES
                  for route in module.router.routes
                  if isinstance(route, APIRoute) for method in route.methods)


def test_every_route_has_exactly_one_rule_and_every_rule_a_route() -> None:
    routes = api_routes()
    assert len(routes) > 100
    assert [r for r in routes if access.rule_of(*r) is None] == []
    assert sorted(set(access.RULES) - set(routes)) == []  # no rule for a route that is gone


def test_the_app_refuses_to_start_with_a_route_without_a_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone = ("DELETE", "/api/v1/templates/{name}")
    monkeypatch.setattr(access, "RULES", {k: v for k, v in access.RULES.items() if k != gone})
    with pytest.raises(RuntimeError, match="DELETE /api/v1/templates/{name}"):
        create_app(Settings.__new__(Settings), None, None)  # type: ignore[arg-type]


@dataclass
class World:
    """What A owns (the path values) and a fresh token per caller kind."""

    values: dict[str, str]
    tokens: dict[str, Callable[[], Any]]


async def _user(api: httpx.AsyncClient, live_master: LiveMaster) -> tuple[int, str]:
    name = f"access-{uuid.uuid4().hex[:8]}"
    created = await api.post("/api/v1/users",
                             json={"user": {"username": name}, "password": "a-long-password"})
    assert created.status_code == 200, created.text
    return int(created.json()["user"]["id"]), name


@activity.defn(dynamic=True)
async def _hold_runs(args: Sequence[RawValue]) -> None:
    """The phantom agent's runs: they run (heartbeating) until the test ends."""
    while True:
        activity.heartbeat()
        await asyncio.sleep(0.5)


@pytest_asyncio.fixture(loop_scope="session")
async def world(api: httpx.AsyncClient, live_master: LiveMaster) -> AsyncIterator[World]:
    """A's and B's experiments on a phantom agent that stays alive (its liveness activity runs
    here), so the trial tokens stay good for the whole test."""
    pool_name = f"access-{uuid.uuid4().hex[:8]}"
    liveness = Liveness(f"phantom-{pool_name}", beat=0.3)
    async with Worker(live_master.temporal, task_queue=agent_task_queue(liveness.agent_id),
                      activities=[liveness.agent_liveness, _hold_runs],
                      default_heartbeat_throttle_interval=timedelta(seconds=0.5),
                      max_heartbeat_throttle_interval=timedelta(seconds=0.5),
                      graceful_shutdown_timeout=timedelta(0)):
        yield await _world(api, live_master, pool_name)


async def _world(api: httpx.AsyncClient, live_master: LiveMaster, pool_name: str) -> World:
    pool, cluster_token = live_master.pool, live_master.settings.cluster_token
    (a_id, a_name), (b_id, _) = await _user(api, live_master), await _user(api, live_master)

    async def session(user_id: int) -> str:
        return await open_session(pool, user_id, timedelta(minutes=30))

    a = httpx.AsyncClient(base_url=live_master.url, timeout=30,
                          headers={"Authorization": f"Bearer {await session(a_id)}"})
    b = httpx.AsyncClient(base_url=live_master.url, timeout=30,
                          headers={"Authorization": f"Bearer {await session(b_id)}"})
    async with a, b:
        await serve_pool(api, pool_name)
        experiment = (await create(a, pool_name=pool_name))["experiment"]
        mine, _ = await wait_for_trials(a, experiment["id"], 2)
        theirs = (await create(b, pool_name=pool_name))["experiment"]
        their_trial, _ = await wait_for_trials(b, theirs["id"], 2)
        own_token = mint_trial_token(cluster_token, mine["id"], mine["runId"])
        checkpoint = str(uuid.uuid4())
        reported = await a.post("/api/v1/checkpoints", headers={
            "Authorization": f"Bearer {own_token}"}, json={
            "uuid": checkpoint, "taskId": f"{experiment['id']}.{mine['id']}",
            "metadata": {"steps_completed": 1}})
        assert reported.status_code == 200, reported.text
        workspace = (await a.post("/api/v1/workspaces", json={
            "name": f"ws-{uuid.uuid4().hex[:8]}"})).json()["workspace"]
        project = (await a.post(f"/api/v1/workspaces/{workspace['id']}/projects", json={
            "name": "p", "workspaceId": workspace["id"]})).json()["project"]
        template = f"tpl-{uuid.uuid4().hex[:8]}"
        made = await a.post(f"/api/v1/templates/{template}", json={
            "name": template, "config": {"description": "A's"}})
        assert made.status_code == 200, made.text
        model = f"model-{uuid.uuid4().hex[:8]}"
        assert (await a.post("/api/v1/models", json={"name": model})).status_code == 200
        token = await a.post("/api/v1/tokens", json={"userId": a_id})
        assert token.status_code == 200, token.text
    task_id = str(uuid.uuid4())
    await pool.execute(
        "INSERT INTO tasks (id, task_type, owner_id, workspace_id, description, config,"
        " resource_pool, slots, secret) VALUES ($1, 'COMMAND', $2, 1, 'A''s', '{}', 'default',"
        " 0, 'x')", task_id, a_id)
    values = {
        "experiment_id": str(experiment["id"]), "trial_id": str(mine["id"]),
        "allocation_id": f"{experiment['id']}.{mine['id']}.{mine['runId']}",
        "checkpoint_uuid": checkpoint, "task_id": task_id, "workspace_id": str(workspace["id"]),
        "project_id": str(project["id"]), "name": template, "model_name": model, "version": "1",
        "alias": "production", "user_id": str(a_id), "username": a_name,
        "agent_id": f"phantom-{uuid.uuid4().hex[:6]}", "slot_id": "0",
        # `default` is never bound: an admin's empty PUT/DELETE of its bindings changes nothing.
        "pool_name": "default",
        "action": "decode", "token_id": str(token.json()["tokenId"]),
        "external_experiment_id": f"access-{uuid.uuid4().hex[:8]}",
        # The history import's (no such source: an admin's call answers 404 or 422).
        "source_id": "999999", "kind": "users", "external_trial_id": "1",
    }

    async def user_token(user_id: int) -> str:
        return await session(user_id)

    async def admin() -> str:
        return await session(1)

    async def trial(trial_id: int, run_id: int) -> str:
        return mint_trial_token(cluster_token, trial_id, run_id)

    async def agent() -> str:
        return cluster_token

    async def nobody() -> None:
        return None

    tokens: dict[str, Callable[[], Any]] = {
        "anonymous": nobody, "owner": lambda: user_token(a_id),
        "other": lambda: user_token(b_id), "admin": admin,
        "own_trial": lambda: trial(mine["id"], mine["runId"]),
        "others_trial": lambda: trial(their_trial["id"], their_trial["runId"]), "agent": agent,
    }
    return World(values, tokens)


def _url(path: str, values: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "item_id":  # /workspaces/{item_id}/archive or /projects/{item_id}/...
            return values["workspace_id" if "/workspaces/" in path else "project_id"]
        return values[name]

    return re.sub(r"\{(\w+)\}", value, path)


# Bodies where an empty one would change what other tests share: an agent registered by an
# allowed caller goes to a pool of its own, not `default` (with no slots, it would be the
# biggest agent there that other tests' submissions are checked against).
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("PUT", "/api/v1/agents/{agent_id}"): {"resourcePool": f"access-{uuid.uuid4().hex[:8]}",
                                           "bootId": "access-test", "slots": []},
}


async def _call(client: httpx.AsyncClient, method: str, path: str, url: str,
                token: str | None) -> int | None:
    """The answer's status; None when it sent no headers within the timeout (a long poll or
    a stream that the rule let through)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = None if method in ("GET", "DELETE") else BODIES.get((method, path), {})
    request = client.build_request(method, url, headers=headers, json=body)
    try:
        response = await client.send(request, stream=True)
    except httpx.ReadTimeout:
        return None
    await response.aclose()
    return response.status_code


@pytest.mark.asyncio(loop_scope="session")
async def test_every_route_answers_every_caller_as_its_rule_says(
    world: World, live_master: LiveMaster
) -> None:
    routes = sorted(api_routes(), key=lambda r: (bool(STOPPING.search(r[1])),
                                                  bool(ENDING.search(f"{r[0]} {r[1]}"))))
    wrong = []
    async with httpx.AsyncClient(base_url=live_master.url, timeout=5) as client:
        # Refusals first, for every route: none of them may change anything.
        for expected in (False, True):
            for method, path in routes:
                rule = access.rule_of(method, path)
                assert rule is not None
                for caller in sorted(CALLERS, key=lambda c: c in ("owner", "admin")):
                    if allowed(rule, caller, path) is not expected:
                        continue
                    status = await _call(client, method, path, _url(path, world.values),
                                         await world.tokens[caller]())
                    refused = status in (401, 403)
                    if refused is expected:
                        wrong.append(f"{method} {path} ({rule.name}) as {caller}: {status}")
    assert wrong == [], "\n".join(wrong)
