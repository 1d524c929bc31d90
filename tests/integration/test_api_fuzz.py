"""Schemathesis fuzzes every operation of the master's OpenAPI schema: none may answer 5xx.

Four callers, each on a master of its own (a fresh database, its own Temporal namespace and
worker), so what one creates, registers, pauses or kills never reaches another or the test
session's shared master: the admin and an ordinary user, for every operation but the three with
which the fuzzer could lock itself out (logging out, deactivating or re-passwording its own
user); those three as another ordinary user on the admin's master, which may only change that
user; and a running trial's token (what a user's training code holds). One schemathesis run
generates the cases once and sends each to every caller whose selection holds it
(fuzz_callers.py); it runs as schemathesis' CLI in a subprocess, so the event loop keeps serving
the masters. Each test reads its callers' part of the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import pytest_asyncio

from activities.database import apply_migrations, create_pool
from api.app import create_app
from api.auth import ensure_admin_password
from api.settings import Settings
from common.processes import free_port
from common.tokens import mint_trial_token
from deploy.master import build_worker
from tests.conftest import fresh_database
from tests.integration.test_api import config_yaml, model_definition
from tests.master_fixtures import fresh_namespace, serving_in_process

# The run (in the first test's setup) takes about 200 s alone and more than the suite's 300 s per
# test on two cores shared with two other workers: it is every caller's pass at once.
pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.slow,
              pytest.mark.timeout(900)]

PASSWORD = "fuzz-admin-password"
SELF_LOCKING = (
    ("POST", "/api/v1/auth/logout"),
    ("PATCH", "/api/v1/users/{user_id}"),
    ("POST", "/api/v1/users/{user_id}/password"),
)
# The master's logs, followed, stream until the caller hangs up (as on Determined): only an
# admin may read them, and the fuzzer would wait for its timeout.
MASTER_LOGS = ("GET", "/api/v1/master/logs")
# For a running trial the streams, followed logs and the preemption long poll stay open until
# the request times out, which would only spend the test's time.
TRIAL_WAITS = r"/stream$|/signals/preemption$|/(trials|experiments)/\{[a-z_]+\}/logs$"
# Bounded so the run takes about two minutes on two cores; env overrides for deeper runs.
EXAMPLES_PER_OPERATION = int(os.environ.get("EPOCHAL_FUZZ_EXAMPLES", "8"))
SEED = os.environ.get("EPOCHAL_FUZZ_SEED", "20261122")
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class FuzzMaster:
    url: str
    admin_token: str
    cluster_token: str
    pool: asyncpg.Pool


@asynccontextmanager
async def serving_fuzz_master(postgres_url: str, temporal_address: str,
                              checkpoints: Path) -> AsyncIterator[FuzzMaster]:
    """A master of its own: a fresh database, Temporal namespace and worker, and API server."""
    with fresh_database(postgres_url, "epochal_fuzz") as db_url:
        pool = await create_pool(db_url)
        await apply_migrations(pool)
        await ensure_admin_password(pool, PASSWORD)
        temporal = await fresh_namespace(temporal_address, "fuzz")
        port = free_port()
        settings = Settings(db_url=db_url, api_port=port, checkpoint_dir=str(checkpoints),
                            cluster_token=uuid.uuid4().hex, admin_password=PASSWORD)
        app = create_app(settings, pool, temporal)
        try:
            async with build_worker(temporal, pool), \
                    serving_in_process(app, port, log_level="critical"):
                async with httpx.AsyncClient(base_url=settings.master_url) as client:
                    login = await client.post("/api/v1/auth/login",
                                              json={"username": "admin", "password": PASSWORD})
                    login.raise_for_status()
                yield FuzzMaster(settings.master_url, login.json()["token"],
                                 settings.cluster_token, pool)
        finally:
            await pool.close()


@pytest_asyncio.fixture(loop_scope="session")
async def fuzz_master(
    postgres_url: str, temporal_address: str, tmp_path: Path
) -> AsyncIterator[FuzzMaster]:
    async with serving_fuzz_master(postgres_url, temporal_address, tmp_path) as master:
        yield master


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


def _operations(*operations: tuple[str, str]) -> str:
    """A regex matching exactly these operations' "METHOD /path" names."""
    return "|".join(f"^{re.escape(f'{method} {path}')}$" for method, path in operations)


@dataclass(frozen=True)
class FuzzRun:
    """One schemathesis run over every operation, as every caller."""
    output: str
    exit_code: int
    results: dict[str, dict[str, Any]]

    def verdict(self, caller: str) -> dict[str, Any]:
        """`caller`'s part, failing (with schemathesis' report) on a 5xx it got or on a failed
        run that no caller's 5xx explains."""
        result = self.results[caller]
        assert not result["server_errors"], (
            f"{caller} got 5xx answers: {result['server_errors']}\n{self.output}")
        explained = any(part["server_errors"] for part in self.results.values())
        assert self.exit_code == 0 or explained, (
            f"schemathesis failed (exit {self.exit_code}):\n{self.output}")
        return result


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fuzz_run(
    postgres_url: str, temporal_address: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[FuzzRun]:
    """Three masters (the admin's and the self-locking user's, the user's, the trial's) and
    one run of schemathesis against them, in a scratch directory (its cache goes there)."""
    work = tmp_path_factory.mktemp("fuzz")
    async with AsyncExitStack() as stack:
        admins, users, trials = await asyncio.gather(*(
            stack.enter_async_context(serving_fuzz_master(
                postgres_url, temporal_address, work / name))
            for name in ("admin", "user", "trial")))
        callers = [
            {"name": "admin", "url": admins.url, "token": admins.admin_token,
             "exclude": _operations(*SELF_LOCKING, MASTER_LOGS)},
            {"name": "self", "url": admins.url, "token": await _user_token(admins),
             "include": _operations(*SELF_LOCKING)},
            {"name": "user", "url": users.url, "token": await _user_token(users),
             "exclude": _operations(*SELF_LOCKING)},
            {"name": "trial", "url": trials.url, "token": await _trial_token(trials),
             "exclude": TRIAL_WAITS},
        ]
        (work / "callers.json").write_text(json.dumps(callers))
        cmd = [
            str(SCHEMATHESIS), "run", f"{admins.url}/openapi.json",
            "--checks", "not_a_server_error,no_caller_gets_a_server_error",
            "--max-examples", str(EXAMPLES_PER_OPERATION),
            "--phases", "examples,coverage,fuzzing",
            "--workers", "1",
            "--seed", SEED,
            "--no-shrink",
            "--request-timeout", "30",
        ]
        env = {**os.environ, "NO_COLOR": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO),
                                                           os.environ.get("PYTHONPATH")))),
               "SCHEMATHESIS_HOOKS": "tests.integration.fuzz_callers",
               "EPOCHAL_FUZZ_CALLERS": str(work / "callers.json"),
               "EPOCHAL_FUZZ_RESULTS": str(work / "results.json")}
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL, env=env, cwd=work)
        output, _ = await proc.communicate()
        text = output.decode(errors="replace")
        assert (work / "results.json").exists(), f"schemathesis wrote no results:\n{text}"
        yield FuzzRun(text, proc.returncode or 0,
                      json.loads((work / "results.json").read_text()))


async def test_no_operation_answers_5xx(fuzz_run: FuzzRun) -> None:
    assert SCHEMATHESIS.exists(), "schemathesis is part of the `test` extra"
    assert len(fuzz_run.verdict("admin")["operations"]) >= 40, fuzz_run.output
    tested = fuzz_run.verdict("self")["operations"]
    assert tested == sorted(f"{method} {path}" for method, path in SELF_LOCKING), tested


async def test_an_ordinary_users_calls_get_no_5xx(fuzz_run: FuzzRun) -> None:
    assert len(fuzz_run.verdict("user")["operations"]) >= 40, fuzz_run.output


async def test_a_trial_tokens_calls_get_no_5xx(fuzz_run: FuzzRun) -> None:
    """What a user's training code could send with the token it holds."""
    assert len(fuzz_run.verdict("trial")["operations"]) >= 40, fuzz_run.output


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
