"""Logging in and out, the users who may, and their access tokens: Determined's paths and JSON
(`det user ...` and `det token ...` work)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, Field

from api import auth, go_duration, views
from api.auth import CurrentPrincipal, Principal
from api.deps import AppSettings, Pool
from api.errors import ApiError, not_found, require_choice
from api.queries import users as queries
from api.schemas import Empty, answers
from api.schemas.users import (
    LoginAnswer,
    TokenCreated,
    TokenList,
    TokenPatched,
    UserAnswer,
    UserList,
)

router = APIRouter(prefix="/api/v1", tags=["users"])
log = logging.getLogger(__name__)  # who changed whom: names and ids, never a token

USERNAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$"


class LoginRequest(BaseModel):
    username: str = Field(max_length=128)
    password: str = Field(max_length=1024)
    isHashed: bool = False


@router.post("/auth/login", **answers(LoginAnswer))
async def login(
    body: LoginRequest, request: Request, pool: Pool, settings: AppSettings
) -> dict[str, Any]:
    throttle: auth.LoginThrottle = request.app.state.login_throttle
    address = request.client.host if request.client else ""
    wait = throttle.retry_after(body.username, address)
    if wait is not None:
        raise ApiError(429, f"too many failed logins for {body.username!r} from {address}; "
                       f"try again in {wait:.0f} s")
    row = await queries.fetch_user_with_password_hash(pool, body.username)
    matches = await auth.password_matches(
        row["password_hash"] if row else None, body.password, is_hashed=body.isHashed
    )
    if row is None or not matches:
        throttle.failed(body.username, address)
        raise ApiError(401, "invalid username or password")
    throttle.succeeded(body.username, address)
    if not row["active"]:
        raise ApiError(403, f"user {body.username} is deactivated")
    token = await auth.open_session(pool, row["id"], settings.session_ttl)
    return {"token": token, "user": views.user_json(row)}


@router.post("/auth/logout", **answers(Empty))
async def logout(principal: CurrentPrincipal, pool: Pool) -> dict[str, Any]:
    await auth.close_session(pool, principal)
    return {}


async def _user_of(pool: asyncpg.Pool, principal: Principal) -> asyncpg.Record:
    """The user behind a principal: a trial acts for its experiment's owner."""
    if principal.kind == "user" and principal.user_id is not None:
        row = await queries.fetch_user(pool, principal.user_id)
    elif principal.kind == "trial" and principal.trial_id is not None:
        row = await queries.fetch_trial_owner_user(pool, principal.trial_id)
    else:
        raise ApiError(403, "the cluster token is not a user")
    if row is None:
        raise ApiError(404, f"no user behind {principal.describe()}")
    return row


@router.get("/me", **answers(UserAnswer))
async def me(principal: CurrentPrincipal, pool: Pool) -> dict[str, Any]:
    return {"user": views.user_json(await _user_of(pool, principal))}


@router.get("/users", **answers(UserList))
async def list_users(
    pool: Pool,
    limit: int = Query(100, ge=0, le=1000),
    offset: int = Query(0, ge=0),
    active: bool | None = None,
) -> dict[str, Any]:
    """Determined's GetUsers (`det user list` pages on the answer's endIndex)."""
    limit = limit or 100  # Determined's client sends 0 for "the default"
    rows = await queries.fetch_users(pool, active, limit, offset)
    total = await queries.count_users(pool, active)
    return {
        "users": [views.user_json(r) for r in rows],
        "pagination": views.pagination(offset, limit, len(rows), total),
    }


async def _fetch_user(pool: asyncpg.Pool, user_id: int) -> asyncpg.Record:
    row = await queries.fetch_user(pool, user_id)
    if row is None:
        raise not_found("user", user_id)
    return row


@router.get("/users/{username}/by-username", **answers(UserAnswer))
async def get_user_by_username(username: str, pool: Pool) -> dict[str, Any]:
    row = await queries.fetch_user_by_username(pool, username)
    if row is None:
        raise not_found("user", username)
    return {"user": views.user_json(row)}


@router.get("/users/{user_id}", **answers(UserAnswer))
async def get_user(user_id: int, pool: Pool) -> dict[str, Any]:
    return {"user": views.user_json(await _fetch_user(pool, user_id))}


class NewUser(BaseModel):
    username: str = Field(pattern=USERNAME_PATTERN)
    admin: bool = False
    active: bool = True
    displayName: str | None = Field(None, max_length=256)


class PostUserRequest(BaseModel):
    user: NewUser
    password: str | None = Field(None, max_length=1024)
    isHashed: bool = False


@router.post("/users", **answers(UserAnswer))
async def create_user(
    body: PostUserRequest, principal: CurrentPrincipal, pool: Pool
) -> dict[str, Any]:
    auth.require_admin(principal, "create users")
    stored = (
        await auth.hash_password(body.password, is_hashed=body.isHashed)
        if body.password
        else None
    )
    try:
        row = await queries.insert_user(
            pool,
            body.user.username,
            body.user.displayName,
            stored,
            body.user.admin,
            body.user.active,
        )
    except asyncpg.UniqueViolationError as err:
        raise ApiError(409, f"user {body.user.username} already exists") from err
    return {"user": views.user_json(row)}


# Linked ids: an unprivileged user's, never root's nor past what every tool reads as signed.
_LINKED_ID_RANGE = (1, 2**31 - 2)
_UNIX_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$"


class AgentUserGroupBody(BaseModel):
    """Determined's v1AgentUserGroup, as `det user link-with-agent-user` sends it."""

    agentUid: int = Field(ge=_LINKED_ID_RANGE[0], le=_LINKED_ID_RANGE[1])
    agentGid: int = Field(ge=_LINKED_ID_RANGE[0], le=_LINKED_ID_RANGE[1])
    agentUser: str = Field(pattern=_UNIX_NAME)
    agentGroup: str = Field(pattern=_UNIX_NAME)


class PatchUserRequest(BaseModel):
    # `det user rename OLD NEW`: the user themself or an admin (as Determined's basic rules).
    username: str | None = Field(None, pattern=USERNAME_PATTERN)
    password: str | None = Field(None, max_length=1024)
    isHashed: bool = False
    admin: bool | None = None
    active: bool | None = None
    displayName: str | None = Field(None, max_length=256)
    # Determined's per-user agent user (`det user link-with-agent-user`): admins only.
    agentUserGroup: AgentUserGroupBody | None = None


async def _set_password(
    pool: asyncpg.Pool, principal: Principal, user_id: int, password: str, is_hashed: bool
) -> None:
    if not (principal.kind == "user" and (principal.admin or principal.user_id == user_id)):
        raise ApiError(403, f"{principal.describe()} may not change user {user_id}'s password")
    stored = await auth.hash_password(password, is_hashed=is_hashed)
    await queries.update_user_password(pool, user_id, stored)


@router.patch("/users/{user_id}", **answers(UserAnswer))
async def patch_user(
    user_id: int, body: PatchUserRequest, principal: CurrentPrincipal, pool: Pool
) -> dict[str, Any]:
    await _fetch_user(pool, user_id)
    link = body.agentUserGroup
    if link is not None:
        auth.require_admin(principal, "link a user with an agent user")
        await queries.link_agent_user(pool, user_id, link.agentUid, link.agentGid,
                                      link.agentUser, link.agentGroup)
    if body.admin is not None or body.active is not None:
        auth.require_admin(principal, "change a user's admin or active flag")
        if principal.user_id == user_id and (body.admin is False or body.active is False):
            raise ApiError(409, "an admin may not remove their own admin rights or deactivate")
    if body.displayName is not None and not (
        principal.kind == "user" and (principal.admin or principal.user_id == user_id)
    ):
        raise ApiError(403, f"{principal.describe()} may not rename user {user_id}")
    if body.password is not None:
        await _set_password(pool, principal, user_id, body.password, body.isHashed)
    if body.username is not None:
        await _rename(pool, principal, user_id, body.username)
    await queries.update_user(pool, user_id, body.admin, body.active, body.displayName)
    if body.active is False:
        await queries.delete_user_sessions(pool, user_id)
    return {"user": views.user_json(await _fetch_user(pool, user_id))}


async def _rename(pool: asyncpg.Pool, principal: Principal, user_id: int, username: str) -> None:
    """The user's name, and every owner column that holds it, in one transaction: sessions and
    access tokens name the user by id and keep working."""
    if not (principal.kind == "user" and (principal.admin or principal.user_id == user_id)):
        raise ApiError(403, f"{principal.describe()} may not rename user {user_id}")
    try:
        async with pool.acquire() as conn, conn.transaction():
            old = await queries.rename_user(conn, user_id, username)
    except asyncpg.UniqueViolationError as err:
        raise ApiError(409, f"username {username} is taken by another user") from err
    if old != username:
        log.info("%s renamed user %d from %s to %s", principal.describe(), user_id, old,
                 username)


@router.post("/users/{user_id}/password", **answers(UserAnswer))
async def set_user_password(
    user_id: int,
    request: Request,
    principal: CurrentPrincipal,
    pool: Pool,
    password: str = Body(max_length=1024, description="The new password, salted and hashed"),
) -> dict[str, Any]:
    """Determined's SetUserPassword: the body is the password as Determined's client hashes it."""
    await _fetch_user(pool, user_id)
    await _set_password(pool, principal, user_id, password, is_hashed=True)
    return {"user": views.user_json(await _fetch_user(pool, user_id))}


# -- access tokens (`det token ...`) -----------------------------------------------------------
# A user sees, creates, edits and revokes their own; an admin everyone's. (Determined's basic
# rules let only admins create, edit or revoke; Epochal lets users manage their own.)

MAX_TOKEN_DESCRIPTION = 512
MAX_TOKEN_IDS = 100
INFINITE_LIFESPAN = "-1"  # Determined's "as long as allowed"


def token_json(row: asyncpg.Record) -> dict[str, Any]:
    """Determined's v1TokenInfo."""
    return {"id": row["id"], "userId": row["user_id"], "description": row["description"],
            "createdAt": views.rfc3339(row["created_at"]),
            "expiry": views.rfc3339(row["expires_at"]), "revoked": row["revoked"],
            "tokenType": "TOKEN_TYPE_ACCESS_TOKEN"}


@router.get("/tokens", **answers(TokenList))
async def list_access_tokens(
    principal: CurrentPrincipal,
    pool: Pool,
    username: str | None = Query(None, max_length=128),
    tokenIds: Annotated[list[int] | None, Query(max_length=MAX_TOKEN_IDS)] = None,  # noqa: N803
    showInactive: bool = False,  # noqa: N803
    sortBy: str = "SORT_BY_UNSPECIFIED",  # noqa: N803
    orderBy: str = "ORDER_BY_UNSPECIFIED",  # noqa: N803
    limit: int = Query(0, ge=0, le=1000),
    offset: int = Query(0, ge=0, le=2**31 - 1),
) -> dict[str, Any]:
    """Determined's GetAccessTokens: a user's own tokens (`username` another's: admins only),
    live ones unless `showInactive`."""
    require_choice("sortBy", sortBy, queries.TOKEN_ORDERS)
    require_choice("orderBy", orderBy, ("ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC"))
    user_id = principal.user_id
    if username:
        row = await queries.fetch_user_by_username(pool, username)
        if row is None:
            raise not_found("user", username)
        if row["id"] != principal.user_id and not principal.admin:
            raise ApiError(403, f"user {principal.username} may not see the access tokens of "
                           f"{username}")
        user_id = row["id"]
    elif principal.admin:
        user_id = None  # an admin sees everyone's
    limit = limit or 1000
    rows, total = await queries.fetch_access_tokens(
        pool, user_id=user_id, token_ids=[i for i in tokenIds or [] if 0 < i < 2**31] or None,
        show_inactive=showInactive, order=sortBy, descending=orderBy == "ORDER_BY_DESC",
        limit=limit, offset=offset)
    return {"tokenInfo": [token_json(r) for r in rows],
            "pagination": views.pagination(offset, limit, len(rows), total)}


class PostAccessTokenRequest(BaseModel):
    userId: int = Field(ge=1, le=2**31 - 1)
    lifespan: str | None = Field(None, max_length=64, description="A Go duration, or -1")
    description: str | None = Field(None, max_length=MAX_TOKEN_DESCRIPTION)


def _lifespan(text: str | None) -> timedelta:
    longest = timedelta(days=auth.ACCESS_TOKEN_MAX_DAYS)
    if text is None or not text.strip():
        return timedelta(days=auth.ACCESS_TOKEN_DEFAULT_DAYS)
    if text.strip() == INFINITE_LIFESPAN:
        return longest
    lifespan = go_duration.parse("lifespan", text, longest=longest)
    if lifespan <= timedelta(0):
        raise ApiError(400, "bad lifespan", ["lifespan: must be longer than 0, or -1 for the "
                                             f"longest ({auth.ACCESS_TOKEN_MAX_DAYS} days)"])
    return lifespan


@router.post("/tokens", **answers(TokenCreated))
async def create_access_token(
    body: PostAccessTokenRequest, principal: CurrentPrincipal, pool: Pool
) -> dict[str, Any]:
    """Determined's PostAccessToken (`det token create [USER] [-e DAYS] [-d TEXT]`)."""
    if body.userId != principal.user_id and not principal.admin:
        raise ApiError(403, f"user {principal.username} may create access tokens only for "
                       "themself")
    lifespan = _lifespan(body.lifespan)
    async with pool.acquire() as conn, conn.transaction():
        if not await queries.lock_user(conn, body.userId):
            raise not_found("user", body.userId)
        if await queries.count_live_access_tokens(conn, body.userId) >= (
                auth.MAX_ACCESS_TOKENS_PER_USER):
            raise ApiError(409, f"user {body.userId} has {auth.MAX_ACCESS_TOKENS_PER_USER} live "
                           "access tokens, the most allowed: revoke one first")
        token_id, token = await auth.create_access_token(conn, body.userId, lifespan,
                                                         body.description or "")
    log.info("%s created access token %d of user %d, for %g days", principal.describe(),
             token_id, body.userId, lifespan.total_seconds() / 86400)
    return {"token": token, "tokenId": token_id}


class PatchAccessTokenRequest(BaseModel):
    tokenId: int | None = Field(None, ge=1, le=2**31 - 1)
    description: str | None = Field(None, max_length=MAX_TOKEN_DESCRIPTION)
    setRevoked: bool = False


@router.patch("/tokens/{token_id}", **answers(TokenPatched))
async def patch_access_token(
    token_id: int, body: PatchAccessTokenRequest, principal: CurrentPrincipal, pool: Pool
) -> dict[str, Any]:
    """Determined's PatchAccessToken (`det token edit ID -d TEXT`, `det token revoke ID`): only
    a live token changes. Who may is the route's rule (its user or an admin)."""
    if body.tokenId is not None and body.tokenId != token_id:
        raise ApiError(400, "bad tokenId", [f"tokenId: {body.tokenId} is not the token of the "
                                            f"path ({token_id})"])
    row = await queries.update_access_token(pool, token_id, body.description, body.setRevoked)
    if row is None:
        found = await queries.fetch_access_token(pool, token_id)
        if found is None:
            raise not_found("access token", token_id)
        why = "revoked" if found["revoked"] else "expired"
        raise ApiError(409, f"access token {token_id} is {why}: it cannot be changed")
    if body.setRevoked:
        log.info("%s revoked access token %d of user %d", principal.describe(), token_id,
                 row["user_id"])
    return {"tokenInfo": token_json(row)}
