"""Users, their sessions, and who owns an experiment or a trial (api/auth.py's checks)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

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


async def replace_run_session(conn: Conn, table: Literal["trials", "tasks"], run_id: int | str,
                              session_hash: bytes) -> bytes | None:
    """Record the session minted for a trial's running run or a task's code (`table` names
    which, `run_id` its id); answers the one it replaces (revoke it)."""
    old: bytes | None = await conn.fetchval(
        f"UPDATE {table} r SET session_hash = $2 FROM (SELECT session_hash FROM {table}"
        " WHERE id = $1 FOR UPDATE) old WHERE r.id = $1 RETURNING old.session_hash",
        run_id, session_hash)
    return old


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


# -- renaming ----------------------------------------------------------------------------------

# Every column that names a user by username: a rename changes them all in one transaction.
OWNER_COLUMNS = (("experiments", "owner"), ("workspaces", "owner"), ("projects", "owner"),
                 ("templates", "owner"), ("models", "owner"), ("model_versions", "owner"))


async def rename_user(conn: asyncpg.Connection, user_id: int, username: str) -> str | None:
    """Rename the user and what they own (the caller holds a transaction); the old name, or
    None if there is no such user. Raises asyncpg.UniqueViolationError if the name is taken."""
    old: str | None = await conn.fetchval(
        "SELECT username FROM users WHERE id = $1 FOR UPDATE", user_id)
    if old is None or old == username:
        return old
    await conn.execute("UPDATE users SET username = $2, modified_at = now() WHERE id = $1",
                       user_id, username)
    for table, column in OWNER_COLUMNS:
        await conn.execute(f"UPDATE {table} SET {column} = $2 WHERE {column} = $1", old,
                           username)
    return old


# -- access tokens -----------------------------------------------------------------------------

_TOKEN_COLUMNS = ("t.id, t.user_id, t.description, t.created_at, t.expires_at,"
                  " t.revoked_at IS NOT NULL AS revoked")


async def insert_access_token(conn: Conn, user_id: int, token_hash: bytes, lifespan: timedelta,
                              description: str) -> int:
    token_id: int = await conn.fetchval(
        "INSERT INTO access_tokens (user_id, token_hash, description, expires_at)"
        " VALUES ($1, $2, $3, now() + $4) RETURNING id",
        user_id, token_hash, description, lifespan)
    return token_id


async def lock_user(conn: asyncpg.Connection, user_id: int) -> bool:
    """Lock the user's row (token creations of one user one after the other); whether it
    exists."""
    return bool(await conn.fetchval("SELECT true FROM users WHERE id = $1 FOR UPDATE", user_id))


async def count_live_access_tokens(conn: Conn, user_id: int) -> int:
    count: int = await conn.fetchval(
        "SELECT count(*) FROM access_tokens WHERE user_id = $1 AND revoked_at IS NULL"
        " AND expires_at > now()", user_id)
    return count


async def fetch_access_token_user(conn: Conn, token_hash: bytes) -> asyncpg.Record | None:
    """The token's user (id, username, admin, active), and whether it is revoked or expired."""
    return await conn.fetchrow(
        "SELECT u.id, u.username, u.admin, u.active, t.id AS token_id,"
        " t.revoked_at IS NOT NULL AS revoked, t.expires_at <= now() AS expired"
        " FROM access_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = $1",
        token_hash)


async def fetch_access_tokens(conn: Conn, *, user_id: int | None, token_ids: list[int] | None,
                              show_inactive: bool, order: str, descending: bool, limit: int,
                              offset: int) -> tuple[list[asyncpg.Record], int]:
    """A page of tokens (of one user, or everyone's; only these ids; live ones unless
    `show_inactive`) ordered by `order` (a column of _TOKEN_ORDER), and how many match."""
    where = ("($1::int IS NULL OR t.user_id = $1) AND ($2::int[] IS NULL OR t.id = ANY($2))"
             " AND ($3 OR (t.revoked_at IS NULL AND t.expires_at > now()))")
    column = _TOKEN_ORDER[order]
    direction = "DESC" if descending else "ASC"
    rows = await conn.fetch(
        f"SELECT {_TOKEN_COLUMNS} FROM access_tokens t WHERE {where}"
        f" ORDER BY {column} {direction}, t.id LIMIT $4 OFFSET $5",
        user_id, token_ids, show_inactive, limit, offset)
    total: int = await conn.fetchval(f"SELECT count(*) FROM access_tokens t WHERE {where}",
                                     user_id, token_ids, show_inactive)
    return list(rows), total


# Determined's GetAccessTokensRequest.SortBy, as columns.
_TOKEN_ORDER = {
    "SORT_BY_UNSPECIFIED": "t.id", "SORT_BY_USER_ID": "t.user_id",
    "SORT_BY_EXPIRY": "t.expires_at", "SORT_BY_CREATED_AT": "t.created_at",
    "SORT_BY_TOKEN_TYPE": "t.id", "SORT_BY_REVOKED": "t.revoked_at",
    "SORT_BY_DESCRIPTION": "t.description",
}
TOKEN_ORDERS = tuple(_TOKEN_ORDER)


async def fetch_access_token(conn: Conn, token_id: int) -> asyncpg.Record | None:
    return await conn.fetchrow(
        f"SELECT {_TOKEN_COLUMNS}, t.expires_at <= now() AS expired FROM access_tokens t"
        " WHERE t.id = $1", token_id)


async def update_access_token(conn: Conn, token_id: int, description: str | None,
                              revoke: bool) -> asyncpg.Record | None:
    """Change a live token's description, or revoke it; None if it is not live (or gone)."""
    return await conn.fetchrow(
        "UPDATE access_tokens t SET description = coalesce($2, description),"
        " revoked_at = CASE WHEN $3 THEN now() ELSE revoked_at END"
        " WHERE id = $1 AND revoked_at IS NULL AND expires_at > now()"
        f" RETURNING {_TOKEN_COLUMNS}", token_id, description, revoke)


async def access_token_owner(conn: Conn, token_id: int) -> str | None:
    """The username of the token's user (who may change it, api/access.py)."""
    owner: str | None = await conn.fetchval(
        "SELECT u.username FROM access_tokens t JOIN users u ON u.id = t.user_id"
        " WHERE t.id = $1", token_id)
    return owner
