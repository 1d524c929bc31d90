"""Schemathesis fuzzes every operation of the master's OpenAPI schema: none may answer 5xx.

The fuzzer gets a master of its own (a fresh database, its own Temporal namespace and worker), so
what it creates, registers, pauses or kills never reaches the test session's shared master. It
runs as schemathesis' CLI in a subprocess, so this test's event loop keeps serving the master.

Four passes (three tests), each with another caller's token: the admin's and an ordinary
user's for every operation but the three with which the fuzzer could lock itself out (logging
out, deactivating or re-passwording its own user); then those three with another ordinary user's
token, which may only change that user; last a running trial's token (what a user's training
code holds).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest
import pytest_asyncio
import uvicorn

from activities.database import apply_migrations, create_pool
from api.app import create_app
from api.auth import ensure_admin_password
from api.settings import Settings
from common.processes import free_port
from common.tokens import mint_trial_token
from deploy.master import build_worker
from tests.conftest import fresh_database
from tests.integration.test_api import config_yaml, model_definition
from tests.master_fixtures import fresh_namespace

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow]

PASSWORD = "fuzz-admin-password"
SELF_LOCKING = (
    ("POST", "/api/v1/auth/logout"),
    ("PATCH", "/api/v1/users/{user_id}"),
    ("POST", "/api/v1/users/{user_id}/password"),
)
# Bounded so the test takes well under two minutes on two cores; env overrides for deeper runs.
EXAMPLES_PER_OPERATION = int(os.environ.get("EPOCHAL_FUZZ_EXAMPLES", "8"))
SEED = os.environ.get("EPOCHAL_FUZZ_SEED", "20261122")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


@dataclass(frozen=True)
class FuzzMaster:
    url: str
    admin_token: str
    cluster_token: str
    pool: asyncpg.Pool


@pytest_asyncio.fixture(loop_scope="session")
async def fuzz_master(
    postgres_url: str, temporal_address: str, tmp_path: Path
) -> AsyncIterator[FuzzMaster]:
    with fresh_database(postgres_url, "epochal_fuzz") as db_url:
        pool = await create_pool(db_url)
        await apply_migrations(pool)
        await ensure_admin_password(pool, PASSWORD)
        temporal = await fresh_namespace(temporal_address, "fuzz")
        port = free_port()
        settings = Settings(db_url=db_url, api_port=port, checkpoint_dir=str(tmp_path),
                            cluster_token=uuid.uuid4().hex, admin_password=PASSWORD)
        server = uvicorn.Server(uvicorn.Config(
            create_app(settings, pool, temporal), host="127.0.0.1", port=port,
            log_level="critical", lifespan="on", timeout_graceful_shutdown=1))
        server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        try:
            async with build_worker(temporal, pool):
                task = asyncio.create_task(server.serve())
                while not server.started:
                    assert not task.done(), "the fuzzer's API server did not start"
                    await asyncio.sleep(0.02)
                async with httpx.AsyncClient(base_url=settings.master_url) as client:
                    login = await client.post("/api/v1/auth/login",
                                              json={"username": "admin", "password": PASSWORD})
                    login.raise_for_status()
                try:
                    yield FuzzMaster(settings.master_url, login.json()["token"],
                                     settings.cluster_token, pool)
                finally:
                    server.should_exit = True
                    await task
        finally:
            await pool.close()


async def _user_token(master: FuzzMaster) -> str:
    name = f"fuzzer-{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=master.url) as client:
        made = await client.post(
            "/api/v1/users",
            headers={"Authorization": f"Bearer {master.admin_token}"},
            json={"user": {"username": name, "admin": False, "active": True},
                  "password": PASSWORD, "isHashed": False},
        )
        assert made.status_code == 200, made.text
        login = await client.post("/api/v1/auth/login",
                                  json={"username": name, "password": PASSWORD})
        login.raise_for_status()
        return str(login.json()["token"])


async def _trial_token(master: FuzzMaster) -> str:
    """The token of a running trial's run. The trial is a row of its own in an experiment whose
    pool no agent serves, so no workflow ends that run while the fuzzer uses its token."""
    admin = {"Authorization": f"Bearer {master.admin_token}"}
    async with httpx.AsyncClient(base_url=master.url) as client:
        created = await client.post("/api/v1/experiments", headers=admin, json={
            "config": config_yaml(), "modelDefinition": model_definition({"train.py": b""})})
        assert created.status_code == 200, created.text
    trial_id = await master.pool.fetchval(
        "INSERT INTO trials (experiment_id, request_id, hparams, seed, state, run_id)"
        " VALUES ($1, 1000, '{}', 1, 'RUNNING', 1) RETURNING id",
        created.json()["experiment"]["id"])
    return mint_trial_token(master.cluster_token, trial_id, 1)


def _operation_filter(include: bool, *others: tuple[str, str]) -> list[str]:
    """schemathesis arguments selecting (or leaving out) the self-locking operations (and
    `others`: schemathesis ANDs filters of different kinds, so they go in one regex)."""
    regex = "|".join(f"^{method} {path}$".replace("{", r"\{").replace("}", r"\}")
                     for method, path in (*SELF_LOCKING, *others))
    return [f"--{'include' if include else 'exclude'}-name-regex", regex]


async def _fuzz(master: FuzzMaster, token: str, selection: list[str], report: Path) -> str:
    """Run schemathesis in `report`'s directory (its cache goes there, not into the tree)."""
    cmd = [
        str(SCHEMATHESIS), "run", f"{master.url}/openapi.json",
        "--checks", "not_a_server_error",
        "--max-examples", str(EXAMPLES_PER_OPERATION),
        "--phases", "examples,coverage,fuzzing",
        "--workers", "1",
        "--seed", SEED,
        "--no-shrink",
        "--request-timeout", "30",
        "--header", f"Authorization: Bearer {token}",
        "--report", "junit", "--report-junit-path", str(report),
        *selection,
    ]
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL, env={**os.environ, "NO_COLOR": "1"}, cwd=report.parent,
    )
    output, _ = await proc.communicate()
    text = output.decode(errors="replace")
    assert proc.returncode == 0, f"schemathesis found 5xx answers (exit {proc.returncode}):\n{text}"
    return text


def _tested(summary: str) -> int:
    """How many operations schemathesis says it tested (its summary's "Tested: N")."""
    found = re.search(r"Tested: (\d+)", summary)
    assert found, f"no summary in schemathesis' output:\n{summary}"
    return int(found.group(1))


async def test_no_operation_answers_5xx(fuzz_master: FuzzMaster, tmp_path: Path) -> None:
    assert SCHEMATHESIS.exists(), "schemathesis is part of the `test` extra"
    # The master's logs, followed, stream until the caller hangs up (as on Determined): only
    # an admin may read them, and the fuzzer would wait for its timeout.
    summary = await _fuzz(fuzz_master, fuzz_master.admin_token,
                          _operation_filter(False, ("GET", "/api/v1/master/logs")),
                          tmp_path / "admin.xml")
    assert _tested(summary) >= 40, summary
    user = await _user_token(fuzz_master)
    summary = await _fuzz(fuzz_master, user, _operation_filter(True), tmp_path / "self.xml")
    assert _tested(summary) == len(SELF_LOCKING), summary


async def test_an_ordinary_users_calls_get_no_5xx(fuzz_master: FuzzMaster, tmp_path: Path) -> None:
    user = await _user_token(fuzz_master)
    summary = await _fuzz(fuzz_master, user, _operation_filter(False), tmp_path / "user.xml")
    assert _tested(summary) >= 40, summary


async def test_a_trial_tokens_calls_get_no_5xx(fuzz_master: FuzzMaster, tmp_path: Path) -> None:
    """What a user's training code could send with the token it holds. The streams, followed
    logs and the preemption long poll are left out: for a running trial they stay open until
    the request times out, which would only spend the test's time."""
    trial = await _trial_token(fuzz_master)
    waiting = r"/stream$|/signals/preemption$|/(trials|experiments)/\{[a-z_]+\}/logs$"
    summary = await _fuzz(fuzz_master, trial, ["--exclude-path-regex", waiting],
                          tmp_path / "trial.xml")
    assert _tested(summary) >= 40, summary


async def test_values_the_database_cannot_hold_are_bad_requests(
    fuzz_master: FuzzMaster,
) -> None:
    """What the fuzzer first found: ids past PostgreSQL's integer range and NUL characters
    reached the database and came back as 500s."""
    headers = {"Authorization": f"Bearer {fuzz_master.admin_token}"}
    async with httpx.AsyncClient(base_url=fuzz_master.url, headers=headers) as client:
        big = await client.get("/api/v1/experiments/110570845175")
        assert big.status_code == 400, big.text
        assert big.json()["details"][0].startswith("experiment_id: 110570845175 is out of range")
        killed = await client.post(f"/api/v1/experiments/{-(2**60)}/kill")
        assert killed.status_code == 400, killed.text
        nul = await client.post("/api/v1/auth/login",
                                json={"username": "ad\u0000min", "password": "x" * 8})
        assert nul.status_code in (400, 401), nul.text
