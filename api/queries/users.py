"""Users, their sessions, and who owns an experiment or a trial (api/auth.py's checks)."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from api.queries import Conn

USER_COLUMNS = ("id, username, display_name, admin, active, modified_at, agent_uid, agent_gid,"
                " agent_user, agent_group")


async def fetch_user(conn: Conn, user_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE id = $1", user_id)


async def fetch_user_by_username(conn: Conn, username: str) -> asyncpg.Record | None:
    return await conn.fetchrow(f"SELECT {USER_COLUMNS} FROM users WHERE username = $1", username)


async def fetch_user_with_password_hash(conn: Conn, username: str) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {USER_COLUMNS}, password_hash FROM users WHERE username = $1", username
    )


async def fetch_trial_owner_user(conn: Conn, trial_id: int) -> asyncpg.Record | None:
    """The owner of the trial's experiment: the user a trial token acts for."""
    return await conn.fetchrow(
        f"SELECT {USER_COLUMNS} FROM users WHERE username = (SELECT e.owner FROM trials t"
        " JOIN experiments e ON e.id = t.experiment_id WHERE t.id = $1)",
        trial_id,
    )


async def fetch_users(
    conn: Conn, active: bool | None, limit: int, offset: int
) -> list[asyncpg.Record]:
    """A page of users by id, all of them or only the (in)active ones."""
    rows: list[asyncpg.Record] = await conn.fetch(
        f"SELECT {USER_COLUMNS} FROM users WHERE ($1::boolean IS NULL OR active = $1)"
        " ORDER BY id LIMIT $2 OFFSET $3",
        active,
        limit,
        offset,
    )
    return rows


async def count_users(conn: Conn, active: bool | None) -> int:
    total: int = await conn.fetchval(
        "SELECT count(*) FROM users WHERE ($1::boolean IS NULL OR active = $1)", active
    )
    return total


async def insert_user(
    conn: Conn,
    username: str,
    display_name: str | None,
    password_hash: str | None,
    admin: bool,
    active: bool,
) -> asyncpg.Record:
    """Raises asyncpg.UniqueViolationError if the username is taken."""
    return await conn.fetchrow(
        "INSERT INTO users (username, display_name, password_hash, admin, active)"
        f" VALUES ($1, $2, $3, $4, $5) RETURNING {USER_COLUMNS}",
        username,
        display_name,
        password_hash,
        admin,
        active,
    )


async def update_user_password(conn: Conn, user_id: int, password_hash: str) -> None:
    await conn.execute(
        "UPDATE users SET password_hash = $2, modified_at = now() WHERE id = $1",
        user_id,
        password_hash,
    )


async def link_agent_user(conn: Conn, user_id: int, uid: int, gid: int, user: str,
                          group: str) -> None:
    """The Unix identity the user's runs have on agents (`det user link-with-agent-user`)."""
    await conn.execute(
        "UPDATE users SET agent_uid = $2, agent_gid = $3, agent_user = $4, agent_group = $5,"
        " modified_at = now() WHERE id = $1", user_id, uid, gid, user, group)


async def update_user(
    conn: Conn,
    user_id: int,
    admin: bool | None,
    active: bool | None,
    display_name: str | None,
) -> None:
    """Set the flags and display name given; None keeps a value as it is."""
    await conn.execute(
        "UPDATE users SET admin = coalesce($2, admin), active = coalesce($3, active),"
        " display_name = coalesce($4, display_name), modified_at = now() WHERE id = $1",
        user_id,
        admin,
        active,
        display_name,
    )


async def set_initial_admin_password(conn: Conn, password_hash: str) -> None:
    """Give `admin` this password only if it has none yet (a later change is kept)."""
    await conn.execute(
        "UPDATE users SET password_hash = $1, modified_at = now()"
        " WHERE username = 'admin' AND password_hash IS NULL",
        password_hash,
    )


async def insert_session(conn: Conn, token_hash: bytes, user_id: int, ttl: timedelta) -> None:
    await conn.execute(
        "INSERT INTO user_sessions (token_hash, user_id, expires_at) VALUES ($1, $2, now() + $3)",
        token_hash,
        user_id,
        ttl,
    )


async def delete_session(conn: Conn, token_hash: bytes) -> None:
    await conn.execute("DELETE FROM user_sessions WHERE token_hash = $1", token_hash)


async def delete_user_sessions(conn: Conn, user_id: int) -> None:
    await conn.execute("DELETE FROM user_sessions WHERE user_id = $1", user_id)


async def fetch_session_user(conn: Conn, token_hash: bytes) -> asyncpg.Record | None:
    """The session's user (id, username, admin, active) and whether the session expired."""
    return await conn.fetchrow(
        "SELECT u.id, u.username, u.admin, u.active, s.expires_at < now() AS expired"
        " FROM user_sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = $1",
        token_hash,
    )


async def fetch_trial_run_state(conn: Conn, trial_id: int) -> asyncpg.Record | None:
    """The trial's current run and state, and whether its experiment's owner is active."""
    return await conn.fetchrow(
        "SELECT t.run_id, t.state, u.active FROM trials t"
        " JOIN experiments e ON e.id = t.experiment_id"
        " LEFT JOIN users u ON u.username = e.owner WHERE t.id = $1", trial_id)
