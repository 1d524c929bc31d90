"""Authentication and scoping against the live master: users, the cluster token, trial tokens."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from api.auth import DETERMINED_PASSWORD_SALT
from common.tokens import mint_trial_token
from tests.integration.test_api import create, serve_pool, wait_for_trials
from tests.master_fixtures import ADMIN_PASSWORD, LiveMaster

pytestmark = pytest.mark.asyncio(loop_scope="session")


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def login(master: LiveMaster, username: str, password: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=master.url) as client:
        return await client.post(
            "/api/v1/auth/login", json={"username": username, "password": password}
        )


@pytest_asyncio.fixture(loop_scope="session")
async def ordinary(api: httpx.AsyncClient, live_master: LiveMaster) -> AsyncIterator[str]:
    """A new non-admin user's token."""
    name = f"user-{uuid.uuid4().hex[:8]}"
    created = await api.post(
        "/api/v1/users",
        json={"user": {"username": name}, "password": "a-long-password"},
    )
    assert created.status_code == 200, created.text
    answer = await login(live_master, name, "a-long-password")
    assert answer.status_code == 200, answer.text
    yield answer.json()["token"]


async def test_routes_need_a_token_but_login_health_and_master_info_do_not(
    live_master: LiveMaster,
) -> None:
    async with httpx.AsyncClient(base_url=live_master.url) as anonymous:
        refused = await anonymous.get("/api/v1/experiments")
        assert refused.status_code == 401
        assert "Authorization: Bearer" in refused.json()["message"]
        assert (await anonymous.get("/api/v1/master")).status_code == 200
        assert (await anonymous.get("/health")).status_code == 200
        malformed = await anonymous.get("/api/v1/experiments", headers={"Authorization": "xyz"})
        assert malformed.status_code == 401
        assert "Bearer" in malformed.json()["message"]


async def test_login_gives_a_token_for_me_and_logout_revokes_it(
    live_master: LiveMaster,
) -> None:
    wrong = await login(live_master, "admin", "not-the-password")
    assert wrong.status_code == 401
    assert wrong.json()["message"] == "invalid username or password"
    assert (await login(live_master, "nobody-here", "whatever-pw")).status_code == 401

    answer = await login(live_master, "admin", ADMIN_PASSWORD)
    assert answer.status_code == 200
    token = answer.json()["token"]
    assert answer.json()["user"]["admin"] is True
    async with httpx.AsyncClient(base_url=live_master.url, headers=bearer(token)) as client:
        me = await client.get("/api/v1/me")
        assert me.json()["user"]["username"] == "admin"
        assert (await client.post("/api/v1/auth/logout")).status_code == 200
        after = await client.get("/api/v1/me")
        assert after.status_code == 401
        assert "log in again" in after.json()["message"]


async def test_determined_clients_log_in_with_the_salted_hash(live_master: LiveMaster) -> None:
    hashed = hashlib.sha512((DETERMINED_PASSWORD_SALT + ADMIN_PASSWORD).encode()).hexdigest()
    async with httpx.AsyncClient(base_url=live_master.url) as client:
        answer = await client.post(
            "/api/v1/auth/login",
            json={"username": "admin", "password": hashed, "isHashed": True},
        )
    assert answer.status_code == 200, answer.text


async def test_expired_and_forged_tokens_are_refused(live_master: LiveMaster) -> None:
    token = (await login(live_master, "admin", ADMIN_PASSWORD)).json()["token"]
    await live_master.pool.execute(
        "UPDATE user_sessions SET expires_at = now() - interval '1 second'"
        " WHERE token_hash = $1",
        hashlib.sha256(token.encode()).digest(),
    )
    async with httpx.AsyncClient(base_url=live_master.url) as client:
        expired = await client.get("/api/v1/experiments", headers=bearer(token))
        assert expired.status_code == 401
        assert "expired" in expired.json()["message"]
        forged = await client.get("/api/v1/experiments", headers=bearer("eps.forged"))
        assert forged.status_code == 401
        forged_trial = mint_trial_token("not-the-cluster-token", 1, 1)
        refused = await client.get("/api/v1/experiments", headers=bearer(forged_trial))
        assert refused.status_code == 401
        assert refused.json()["message"] == "invalid trial token"


async def test_the_dashboard_cookie_reads_but_does_not_write(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    experiment = (await create(api))["experiment"]
    async with httpx.AsyncClient(
        base_url=live_master.url, cookies={"auth": live_master.admin_token}
    ) as browser:
        assert (await browser.get(f"/api/v1/experiments/{experiment['id']}")).status_code == 200
        kill = await browser.post(f"/api/v1/experiments/{experiment['id']}/kill")
        assert kill.status_code == 401
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_a_trial_token_writes_only_its_own_trial(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    created = await create(api)
    experiment = created["experiment"]
    first, second = await wait_for_trials(api, experiment["id"], 2)
    token = mint_trial_token(live_master.settings.cluster_token, first["id"], first["runId"])
    report = {"trialId": first["id"], "trialRunId": 1, "stepsCompleted": 5,
              "metrics": {"avgMetrics": {"loss": 0.5}}}
    async with httpx.AsyncClient(base_url=live_master.url, headers=bearer(token)) as trial:
        own = await trial.post(
            f"/api/v1/trials/{first['id']}/metrics", json={"metrics": report, "group": "training"}
        )
        assert own.status_code == 200, own.text
        other = await trial.post(
            f"/api/v1/trials/{second['id']}/metrics",
            json={"metrics": {**report, "trialId": second["id"]}, "group": "training"},
        )
        assert other.status_code == 403
        assert f"trial {first['id']}" in other.json()["message"]
        other_logs = await trial.post(
            "/api/v1/task/logs",
            json={"logs": [{"taskId": f"{experiment['id']}.{second['id']}", "log": "forged"}]},
        )
        assert other_logs.status_code == 403
        other_checkpoint = await trial.post(
            "/api/v1/checkpoints",
            json={"uuid": str(uuid.uuid4()), "taskId": f"{experiment['id']}.{second['id']}",
                  "metadata": {"steps_completed": 1}},
        )
        assert other_checkpoint.status_code == 403
        kill = await trial.post(f"/api/v1/experiments/{experiment['id']}/kill")
        assert kill.status_code == 403
        # It reads its own trial and experiment, not its sibling's trial (api/access.py).
        assert (await trial.get(f"/api/v1/trials/{first['id']}")).status_code == 200
        assert (await trial.get(f"/api/v1/experiments/{experiment['id']}")).status_code == 200
        assert (await trial.get(f"/api/v1/trials/{second['id']}")).status_code == 403
    stored = await live_master.pool.fetchval(
        "SELECT count(*) FROM metrics WHERE trial_id = $1", second["id"]
    )
    logs = await live_master.pool.fetchval(
        "SELECT count(*) FROM task_logs WHERE trial_id = $1 AND log = 'forged'", second["id"]
    )
    assert (stored, logs) == (0, 0)
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_the_cluster_token_registers_agents_but_creates_no_experiments(
    live_master: LiveMaster,
) -> None:
    async with httpx.AsyncClient(
        base_url=live_master.url, headers=live_master.agent_headers
    ) as agent:
        registered = await agent.put(
            f"/api/v1/agents/auth-test-{uuid.uuid4().hex[:6]}",
            json={"resourcePool": f"auth-{uuid.uuid4().hex[:6]}", "bootId": uuid.uuid4().hex,
                  "slots": [{"id": "0", "type": "TYPE_CPU"}]},
        )
        assert registered.status_code == 200, registered.text
        create_attempt = await agent.post("/api/v1/experiments", json={"config": "name: x"})
        assert create_attempt.status_code == 403
        assert (await agent.get("/api/v1/me")).status_code == 403


async def test_an_ordinary_user_cannot_control_anothers_experiment(
    api: httpx.AsyncClient, live_master: LiveMaster, ordinary: str
) -> None:
    experiment = (await create(api))["experiment"]
    async with httpx.AsyncClient(base_url=live_master.url, headers=bearer(ordinary)) as user:
        kill = await user.post(f"/api/v1/experiments/{experiment['id']}/kill")
        assert kill.status_code == 403
        assert "belongs to admin" in kill.json()["message"]
        disable = await user.post("/api/v1/agents/whatever/disable")
        assert disable.status_code == 403
        new_user = await user.post(
            "/api/v1/users", json={"user": {"username": "sneaky"}, "password": "longenough"}
        )
        assert new_user.status_code == 403
        # Their own experiment is theirs to control.
        pool_name = f"users-{uuid.uuid4().hex[:6]}"
        await serve_pool(api, pool_name)
        own = await create(user, pool_name=pool_name)
        assert own["experiment"]["username"].startswith("user-")
        paused = await user.post(f"/api/v1/experiments/{own['experiment']['id']}/kill")
        assert paused.status_code == 200, paused.text
    state = await live_master.pool.fetchval(
        "SELECT state FROM experiments WHERE id = $1", experiment["id"]
    )
    assert state == "ACTIVE"
    await api.post(f"/api/v1/experiments/{experiment['id']}/kill")


async def test_user_management_errors_name_the_problem(
    api: httpx.AsyncClient, live_master: LiveMaster, ordinary: str
) -> None:
    short = await api.post(
        "/api/v1/users", json={"user": {"username": f"u{uuid.uuid4().hex[:6]}"}, "password": "x"}
    )
    assert short.status_code == 400
    assert short.json()["details"] == ["password: at least 8 characters expected"]
    bad_name = await api.post(
        "/api/v1/users", json={"user": {"username": "has space"}, "password": "longenough"}
    )
    assert bad_name.status_code == 400
    assert bad_name.json()["details"][0].startswith("user.username:")
    duplicate = await api.post(
        "/api/v1/users", json={"user": {"username": "admin"}, "password": "longenough"}
    )
    assert duplicate.status_code == 409

    me = (await api.get("/api/v1/me")).json()["user"]
    async with httpx.AsyncClient(base_url=live_master.url, headers=bearer(ordinary)) as user:
        mine = (await user.get("/api/v1/me")).json()["user"]
        changed = await user.patch(
            f"/api/v1/users/{mine['id']}", json={"password": "another-long-one"}
        )
        assert changed.status_code == 200, changed.text
        promote = await user.patch(f"/api/v1/users/{mine['id']}", json={"admin": True})
        assert promote.status_code == 403
        others = await user.patch(f"/api/v1/users/{me['id']}", json={"password": "hijacked!!"})
        assert others.status_code == 403
    assert (await login(live_master, mine["username"], "another-long-one")).status_code == 200
    assert (await login(live_master, "admin", ADMIN_PASSWORD)).status_code == 200
    missing = await api.get("/api/v1/users/999999")
    assert missing.status_code == 404


async def test_a_trial_token_is_good_only_while_its_run_runs(
    api: httpx.AsyncClient, live_master: LiveMaster
) -> None:
    """Tokens are fenced by their run: another run's, a finished run's, and a deactivated
    owner's tokens are refused, reads included."""
    name = f"fenced-{uuid.uuid4().hex[:8]}"
    created = await api.post("/api/v1/users", json={"user": {"username": name},
                                                    "password": "a-long-password"})
    assert created.status_code == 200, created.text
    user_id = created.json()["user"]["id"]
    token = (await login(live_master, name, "a-long-password")).json()["token"]
    pool_name = f"fence-{uuid.uuid4().hex[:6]}"
    await serve_pool(api, pool_name)
    async with httpx.AsyncClient(base_url=live_master.url, headers=bearer(token)) as user:
        experiment = (await create(user, pool_name=pool_name))["experiment"]
    first, second = await wait_for_trials(api, experiment["id"], 2)
    cluster_token = live_master.settings.cluster_token
    current = bearer(mint_trial_token(cluster_token, first["id"], first["runId"]))
    other_run = bearer(mint_trial_token(cluster_token, first["id"], first["runId"] + 1))
    async with httpx.AsyncClient(base_url=live_master.url) as trial:
        assert (await trial.get(f"/api/v1/trials/{first['id']}", headers=current)).status_code \
            == 200
        refused = await trial.get(f"/api/v1/trials/{first['id']}", headers=other_run)
        assert refused.status_code == 401 and "which is over" in refused.json()["message"]

        deactivated = await api.patch(f"/api/v1/users/{user_id}", json={"active": False})
        assert deactivated.status_code == 200, deactivated.text
        refused = await trial.get(f"/api/v1/trials/{first['id']}", headers=current)
        assert refused.status_code == 403 and "deactivated" in refused.json()["message"]
        await api.patch(f"/api/v1/users/{user_id}", json={"active": True})

        await api.post(f"/api/v1/experiments/{experiment['id']}/kill")
        for _ in range(100):
            row = await live_master.pool.fetchrow(
                "SELECT state FROM trials WHERE id = $1", first["id"])
            if row["state"] != "RUNNING":
                break
            await asyncio.sleep(0.05)
        report = {"trialId": first["id"], "trialRunId": first["runId"], "stepsCompleted": 99,
                  "metrics": {"avgMetrics": {"loss": -1.0}}}
        late = await trial.post(f"/api/v1/trials/{first['id']}/metrics", headers=current,
                                json={"metrics": report, "group": "validation"})
        assert late.status_code == 401, late.text
    stored = await live_master.pool.fetchval(
        "SELECT count(*) FROM metrics WHERE trial_id = $1 AND steps_completed = 99", first["id"])
    assert stored == 0
