"""Determined 0.38.1's own `det` for the cluster's administration against an Epochal cluster:
`det master config|logs|cluster-message`, `det token ...`, `det workspace list-members`,
`det user rename` and `det task list`, as an admin and as an ordinary user (who is refused
where Determined refuses, and never sees another user's tokens).

One real local cluster (master and agent processes) for the module and the real `det` binary,
as tests/determined/test_det_cli.py runs them. The first tests need no cluster: the pieces
the routes are made of, with their bounds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest
import yaml

from api import go_duration, master_config, master_logs
from api.errors import ApiError
from api.settings import Settings
from tests.determined.test_det_cli import Det, header, refused, table_rows
from tests.e2e.cluster import Cluster, shared_servers_cluster
from tests.waiting import wait_for

pytestmark = pytest.mark.slow

PASSWORD = "A-long-passw0rd"
REDACTED = "********"


# -- the pieces, without a cluster -----------------------------------------------------------

def test_go_durations_within_their_bound() -> None:
    longest = timedelta(days=365)
    assert go_duration.parse("f", "24h", longest=longest) == timedelta(hours=24)
    assert go_duration.parse("f", "1h30m", longest=longest) == timedelta(minutes=90)
    assert go_duration.parse("f", "2w", longest=longest) == timedelta(days=14)
    assert go_duration.parse("f", "1.5h", longest=longest) == timedelta(minutes=90)
    for bad in ("-1h", "24", "1y", "h", "", "1h 30m", "9" * 100 + "h"):
        with pytest.raises(ApiError) as refused:
            go_duration.parse("lifespan", bad, longest=longest)
        assert refused.value.status == 400 and refused.value.details[0].startswith("lifespan:")
    with pytest.raises(ApiError, match="lifespan"):
        go_duration.parse("lifespan", "366d", longest=longest)


def test_the_log_ring_keeps_the_newest_records_within_its_bounds() -> None:
    ring = master_logs.MasterLogBuffer(max_records=5, max_bytes=10_000, max_message=100)
    logger = logging.getLogger(f"ring-{uuid.uuid4().hex}")
    logger.propagate, logger.level = False, logging.DEBUG
    logger.addHandler(ring)
    for i in range(8):
        logger.info("record %d", i)
    kept = ring.entries()
    assert [e.message for e in kept] == [f"{logger.name}: record {i}" for i in range(3, 8)]
    assert [e.id for e in kept] == [3, 4, 5, 6, 7]
    assert ring.entries(after_id=6) == kept[-1:] and ring.entries(after_id=7) == []
    logger.warning("x" * 1000)
    assert ring.entries()[-1].message.endswith("characters cut)")
    assert len(ring.entries()[-1].message) < 200
    assert master_logs.level_name(logging.WARNING) == "LOG_LEVEL_WARNING"
    assert master_logs.level_name(5) == "LOG_LEVEL_TRACE"

    by_bytes = master_logs.MasterLogBuffer(max_records=1000, max_bytes=300, max_message=100)
    logger.addHandler(by_bytes)
    for i in range(20):
        logger.error("é" * 40 + str(i))  # two bytes each in UTF-8: about 90 bytes a record
    assert sum(e.size for e in by_bytes.entries()) <= 300
    assert by_bytes.entries()[-1].message.endswith("19")
    assert master_logs.attach(logger) in (ring, by_bytes)  # attaching again adds none


def test_the_printable_config_hides_every_secret() -> None:
    secrets = {"db": "db-pass-123", "token": "cluster-token-456", "admin": "admin-pass-789",
               "access": "AKIA-access", "secret": "s3-secret-key", "api": "temporal-api-key",
               "ui": "ui-pass-000"}
    settings = replace(
        Settings(), db_url=f"postgresql://epochal:{secrets['db']}@db.local:5432/epochal",
        cluster_token=secrets["token"], admin_password=secrets["admin"],
        checkpoint_storage={"type": "s3", "bucket": "b", "access_key": secrets["access"],
                            "secret_key": secrets["secret"],
                            "endpoint_url": "http://s3.local:8333"},
        temporal_ui_url=f"https://ops:{secrets['ui']}@temporal.local",
        temporal_security=replace(Settings().temporal_security, api_key=secrets["api"],
                                  key=b"private-key-bytes"))
    shown = master_config.printable(settings, token_default_days=30, token_max_days=365)
    text = json.dumps(shown)
    for name, value in secrets.items():
        assert value not in text, name
    assert "private-key-bytes" not in text
    assert shown["db"] == {"url": f"postgresql://epochal:{REDACTED}@db.local:5432/epochal",
                           "host": "db.local", "port": 5432, "name": "epochal",
                           "user": "epochal", "password": REDACTED}
    assert shown["checkpoint_storage"]["secret_key"] == REDACTED
    assert shown["checkpoint_storage"]["bucket"] == "b"
    assert shown["security"]["cluster_token"] == REDACTED
    assert shown["temporal"]["api_key"] == REDACTED
    assert shown["temporal"]["ui_url"] == f"https://ops:{REDACTED}@temporal.local"


# -- the cluster ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(postgres_url: str, temporal_address: str, det_venv: Path) -> Iterator[Cluster]:
    share = {"EPOCHAL_SHARE_WITH_TRIALS": str(det_venv.parent.resolve())}
    with shared_servers_cluster(postgres_url, temporal_address, "det-admin", "--slots", "2",
                                env_extra=share) as c:
        yield c


def _det(cluster: Cluster, det_cli: Path, home: Path, **login: str) -> Det:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "DET_MASTER": cluster.url,
           "PYTHONWARNINGS": "ignore", **login}
    return Det(det_cli, cluster.url, env)


@pytest.fixture(scope="module")
def det(cluster: Cluster, det_cli: Path, tmp_path_factory: pytest.TempPathFactory) -> Det:
    """The admin."""
    return _det(cluster, det_cli, tmp_path_factory.mktemp("det-admin"), DET_USER="admin",
                DET_PASS=cluster.secrets["admin_password"])


def _new_user(det: Det, cluster: Cluster, det_cli: Path, home: Path) -> tuple[str, Det]:
    name = f"user-{uuid.uuid4().hex[:8]}"
    det.run("user", "create", name, "--password", PASSWORD)
    return name, _det(cluster, det_cli, home, DET_USER=name, DET_PASS=PASSWORD)


@pytest.fixture(scope="module")
def user(det: Det, cluster: Cluster, det_cli: Path,
         tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Det]:
    """An ordinary user (not an admin), and `det` logged in as them."""
    return _new_user(det, cluster, det_cli, tmp_path_factory.mktemp("det-user"))


def _db(cluster: Cluster, query: str, *args: object) -> list[asyncpg.Record]:
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(cluster.env["EPOCHAL_DB_URL"])
        try:
            return list(await conn.fetch(query, *args))
        finally:
            await conn.close()

    return asyncio.run(run())


def _me(cluster: Cluster, token: str) -> httpx.Response:
    return httpx.get(f"{cluster.url}/api/v1/me", headers={"Authorization": f"Bearer {token}"},
                     timeout=30)


# -- det master config / logs / cluster-message --------------------------------------------------

def test_master_config_is_the_admins_with_every_secret_hidden(
    det: Det, user: tuple[str, Det], cluster: Cluster,
) -> None:
    shown = det.run("master", "config").stdout
    config = yaml.safe_load(shown)
    assert config["cluster_name"] == "epochal"
    assert config["port"] == int(cluster.url.rsplit(":", 1)[1])
    assert config["resource_pools"][0] == {"pool_name": "default"}
    assert config["security"]["cluster_token"] == REDACTED
    assert config["security"]["token"] == {"default_lifespan_days": 30, "max_lifespan_days": 365}
    db_url = cluster.env["EPOCHAL_DB_URL"]
    password = httpx.URL(db_url).password
    assert password and config["db"]["password"] == REDACTED
    as_json = json.loads(det.run("master", "config", "--json").stdout)
    assert as_json == config
    for secret in (password, cluster.secrets["cluster_token"], cluster.secrets["admin_password"]):
        assert secret not in shown and secret not in json.dumps(as_json)

    refused(user[1].run("master", "config", check=False), "admins")


def test_master_logs_the_newest_records_tail_and_follow(
    det: Det, user: tuple[str, Det],
) -> None:
    lines = det.run("master", "logs").stdout.splitlines()
    assert any("master serving on" in line for line in lines), lines[-20:]
    assert all("[" in line and "]: " in line for line in lines)
    assert len(det.run("master", "logs", "--tail", "2").stdout.splitlines()) == 2

    follow = subprocess.Popen(
        [str(det.binary), "-m", det.url, "master", "logs", "-f", "--tail", "1"],
        env={**det.env, "PYTHONUNBUFFERED": "1"},  # each line as det prints it
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    seen: list[str] = []
    stream = follow.stdout
    assert stream is not None
    reader = threading.Thread(target=lambda: seen.extend(iter(stream.readline, "")), daemon=True)
    reader.start()
    try:
        wait_for(lambda: len(seen) >= 1, timeout=60, what="the last record")
        mark = uuid.uuid4().hex[:8]
        det.run("master", "cluster-message", "set", "-m", f"follow {mark}", "-d", "1h")
        # The message's text is not logged, the change is: by whom, when.
        wait_for(lambda: any("user admin set the cluster message" in s for s in seen),
                 timeout=30, what="the record of the change, followed")
        assert not any(mark in s for s in seen)
    finally:
        follow.terminate()
        follow.wait(timeout=30)
    det.run("master", "cluster-message", "clear")

    refused(user[1].run("master", "logs", check=False), "admins")


def test_cluster_message_set_get_and_clear(det: Det, user: tuple[str, Det]) -> None:
    _, as_user = user
    det.run("master", "cluster-message", "set", "-m", "Maintenance at 17:00", "-d", "2h")
    got = yaml.safe_load(det.run("master", "cluster-message", "get").stdout)["clusterMessage"]
    assert got["message"] == "Maintenance at 17:00"
    start = datetime.fromisoformat(got["startTime"])
    end = datetime.fromisoformat(got["endTime"])
    assert end - start == timedelta(hours=2)
    assert abs(datetime.now(UTC) - start) < timedelta(minutes=5)
    # Every logged-in user reads the message shown; `det master info` carries it too.
    theirs = json.loads(as_user.run("master", "cluster-message", "get", "--json").stdout)
    assert theirs["clusterMessage"]["message"] == "Maintenance at 17:00"
    info = yaml.safe_load(as_user.run("master", "info").stdout)
    assert info["clusterMessage"]["message"] == "Maintenance at 17:00"

    refused(as_user.run("master", "cluster-message", "set", "-m", "mine", check=False),
            "admins")
    refused(as_user.run("master", "cluster-message", "clear", check=False), "admins")
    refused(det.run("master", "cluster-message", "set", "-m", "x" * 251, check=False),
            "message")
    refused(det.run("master", "cluster-message", "set", "-m", "past", "-e",
                    "2001-01-01T00:00:00Z", check=False), "endTime")
    refused(det.run("master", "cluster-message", "set", "-m", "bad", "-d", "soon",
                    check=False), "duration")

    # One set to start later replaces the one shown: the admin sees it, users see none yet.
    det.run("master", "cluster-message", "set", "-m", "Upgrade next year", "-s",
            "2099-01-01T00:00:00Z")
    later = yaml.safe_load(det.run("master", "cluster-message", "get").stdout)
    assert later["clusterMessage"]["message"] == "Upgrade next year"
    assert later["clusterMessage"]["endTime"] is None
    assert yaml.safe_load(as_user.run("master", "cluster-message", "get").stdout) == {
        "clusterMessage": None}

    det.run("master", "cluster-message", "clear")
    assert yaml.safe_load(det.run("master", "cluster-message", "get").stdout) == {
        "clusterMessage": None}
    assert yaml.safe_load(det.run("master", "info").stdout).get("clusterMessage") is None


# -- det token -----------------------------------------------------------------------------------

def _created(result: subprocess.CompletedProcess[str]) -> tuple[int, str]:
    lines = dict(line.split(": ", 1) for line in result.stdout.strip().splitlines())
    return int(lines["TokenID"]), lines["Access-Token"]


def _listed(det: Det, *args: str) -> dict[str, list[str]]:
    out = det.run("token", *args).stdout
    assert header(out) == ["ID", "User ID", "Description", "Created At", "Expires At",
                           "Revoked", "Token Type"]
    return {row[0]: row for row in table_rows(out)}


def test_tokens_are_their_users_and_act_as_them_until_revoked(
    det: Det, user: tuple[str, Det], cluster: Cluster, det_cli: Path, tmp_path: Path,
) -> None:
    name, as_user = user
    admins_id, admins_token = _created(det.run("token", "create", "-d", "the admin's"))
    mine_id, mine = _created(as_user.run("token", "create", "-d", "ci", "-e", "2"))
    user_id = _me(cluster, mine).json()["user"]["id"]
    assert _me(cluster, mine).json()["user"]["username"] == name
    assert _me(cluster, admins_token).json()["user"]["username"] == "admin"
    # Only the token's hash is kept.
    [row] = _db(cluster, "SELECT * FROM access_tokens WHERE id = $1", mine_id)
    assert mine not in str(dict(row)) and mine.encode() not in row["token_hash"]

    listed = _listed(as_user, "list")
    assert list(listed) == [str(mine_id)]
    assert listed[str(mine_id)][1:3] == [str(user_id), "ci"]
    assert listed[str(mine_id)][5:] == ["False", "ACCESS_TOKEN"]
    expires = datetime.fromisoformat(
        json.loads(as_user.run("token", "describe", str(mine_id), "--json").stdout)[0]["expiry"])
    assert abs(expires - datetime.now(UTC) - timedelta(days=2)) < timedelta(minutes=5)
    assert {str(admins_id), str(mine_id)} <= set(_listed(det, "list"))
    assert list(_listed(det, "list", name)) == [str(mine_id)]

    # Another user's tokens: not seen, not described, not changed, not made.
    assert _listed(as_user, "describe", str(admins_id)) == {}
    refused(as_user.run("token", "list", "admin", check=False), "may not")
    refused(as_user.run("token", "revoke", str(admins_id), check=False))
    refused(as_user.run("token", "edit", str(admins_id), "-d", "mine now", check=False))
    refused(as_user.run("token", "create", "admin", check=False), "only for themself")
    assert _me(cluster, admins_token).status_code == 200
    refused(as_user.run("token", "create", "-e", "400", check=False), "lifespan")

    edited = as_user.run("token", "edit", str(mine_id), "-d", "ci runner").stdout
    assert '"description": "ci runner"' in edited

    # `det token login`: the CLI then acts as the token's user, with no password.
    by_token = _det(cluster, det_cli, tmp_path)
    assert by_token.run("token", "login", mine).stdout.strip() == f"Authenticated as {name}."
    assert by_token.run("user", "whoami").stdout.strip() == (
        f"You are logged in as user '{name}'")

    revoked = as_user.run("token", "revoke", str(mine_id)).stdout
    assert f"Successfully revoked token {mine_id}." in revoked
    assert _me(cluster, mine).status_code == 401  # at once
    assert by_token.run("user", "whoami", check=False).returncode != 0
    assert _listed(as_user, "list") == {}
    assert _listed(as_user, "list", "--show-inactive")[str(mine_id)][5] == "True"
    refused(as_user.run("token", "revoke", str(mine_id), check=False), "revoked")

    # An admin revokes anyone's; an expired token is refused at once too.
    theirs_id, theirs = _created(as_user.run("token", "create"))
    det.run("token", "revoke", str(theirs_id))
    assert _me(cluster, theirs).status_code == 401
    old_id, old = _created(as_user.run("token", "create"))
    assert _me(cluster, old).status_code == 200
    _db(cluster, "UPDATE access_tokens SET expires_at = now() - interval '1 second'"
        " WHERE id = $1", old_id)
    assert _me(cluster, old).status_code == 401
    assert "expired" in _me(cluster, old).json()["message"]


# -- det workspace list-members ------------------------------------------------------------------

def test_workspace_members_are_its_creator(det: Det, user: tuple[str, Det]) -> None:
    name, as_user = user
    workspace = f"ws-{uuid.uuid4().hex[:6]}"
    as_user.run("workspace", "create", workspace)
    out = det.run("workspace", "list-members", workspace).stdout
    assert header(out) == ["User/Group Name", "User/Group", "Role Name"]
    assert table_rows(out) == [[name, "U", "WorkspaceAdmin"]]
    members = json.loads(as_user.run("workspace", "list-members", workspace, "--json").stdout)
    assert [u["username"] for u in members["usersAssignedDirectly"]] == [name]
    assert members["groups"] == []
    # The workspace every cluster starts with was made by no one.
    assert table_rows(det.run("workspace", "list-members", "Uncategorized").stdout) == []
    refused(det.run("workspace", "list-members", "no-such-workspace", check=False))


# -- det user rename -----------------------------------------------------------------------------

def test_rename_moves_everything_the_user_owns_and_keeps_their_session(
    det: Det, user: tuple[str, Det], cluster: Cluster, det_cli: Path, tmp_path: Path,
) -> None:
    old, renamee = _new_user(det, cluster, det_cli, tmp_path)
    workspace = f"ws-{uuid.uuid4().hex[:6]}"
    renamee.run("workspace", "create", workspace)
    renamee.run("project", "create", workspace, "proj")
    template = tmp_path / "template.yaml"
    template.write_text("description: renamee's\n")
    renamee.run("template", "set", f"tpl-{old}", str(template))
    renamee.run("model", "create", f"model-{old}")
    assert renamee.run("user", "whoami").stdout.strip() == f"You are logged in as user '{old}'"

    new = f"renamed-{uuid.uuid4().hex[:6]}"
    det.run("user", "rename", old, new)
    users = {u["username"] for u in cluster.get("/users", limit=1000)["users"]}
    assert new in users and old not in users
    for table in ("workspaces", "projects", "templates", "models"):
        owners = {r["owner"] for r in _db(cluster, f"SELECT owner FROM {table}")}  # noqa: S608
        assert new in owners and old not in owners, table
    # Their session goes on, as the new name, and they still own what they made.
    assert renamee.run("user", "whoami").stdout.strip() == f"You are logged in as user '{new}'"
    renamee.run("workspace", "archive", workspace)
    assert table_rows(det.run("workspace", "list-members", workspace).stdout) == [
        [new, "U", "WorkspaceAdmin"]]

    refused(det.run("user", "rename", new, "admin", check=False), "username admin is taken")
    refused(det.run("user", "rename", new, "bad name!", check=False), "username")
    user_id = next(u["id"] for u in cluster.get("/users", limit=1000)["users"]
                   if u["username"] == new)

    def patch(username: str) -> httpx.Response:
        return httpx.patch(f"{cluster.url}/api/v1/users/{user_id}", json={"username": username},
                           headers=cluster.headers, timeout=30)

    assert patch("admin").status_code == 409
    bad = patch("bad name!")
    assert bad.status_code == 400 and bad.json()["details"][0].startswith("username:")
    refused(user[1].run("user", "rename", new, "stolen", check=False),
            "may change only their own account")
    # A user renames themself, as on Determined.
    again = f"again-{uuid.uuid4().hex[:6]}"
    renamee.run("user", "rename", new, again)
    assert renamee.run("user", "whoami").stdout.strip() == (
        f"You are logged in as user '{again}'")


# -- det task list -------------------------------------------------------------------------------

def test_task_list_shows_a_running_commands_registration_agent_and_priority(
    det: Det, cluster: Cluster,
) -> None:
    task_id = det.run("cmd", "run", "-d", "sleep 600").stdout.strip()
    try:
        def running() -> bool:
            tasks = cluster.get("/tasks")["allocationIdToSummary"]
            return bool((tasks.get(f"{task_id}.1") or {}).get("resources"))

        wait_for(running, timeout=120, what="the command to get its slot")
        out = det.run("task", "list").stdout
        assert header(out) == ["Task ID", "Allocation ID", "Name", "Slots Needed",
                               "Registered Time", "Agent", "Priority", "Resource Pool", "Ports"]
        row = next(r for r in table_rows(out) if r[0] == task_id)
        assert row[1:4] == [f"{task_id}.1", "Command sleep 600", "1"]
        registered = datetime.strptime(row[4], "%Y-%m-%d %H:%M:%S%z")
        assert abs(datetime.now(UTC) - registered) < timedelta(minutes=10)
        assert row[5:8] == ["local-agent", "42", "default"]
        as_json = json.loads(det.run("task", "list", "--json").stdout)[f"{task_id}.1"]
        [resources] = as_json["resources"]
        assert list(resources["agentDevices"]) == ["local-agent"]
        assert len(resources["agentDevices"]["local-agent"]["devices"]) == 1
    finally:
        det.run("cmd", "kill", task_id)
