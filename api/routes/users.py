"""Logging in and out, and the users who may: Determined's paths and JSON (`det user ...` works)."""

from __future__ import annotations

from typing import Any

import asyncpg
from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, Field

from api import auth, views
from api.auth import CurrentPrincipal, Principal
from api.deps import AppSettings, Pool
from api.errors import ApiError, not_found
from api.queries import users as queries
from api.schemas import Empty, answers
from api.schemas.users import LoginAnswer, UserAnswer, UserList

router = APIRouter(prefix="/api/v1", tags=["users"])

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
    await queries.update_user(pool, user_id, body.admin, body.active, body.displayName)
    if body.active is False:
        await queries.delete_user_sessions(pool, user_id)
    return {"user": views.user_json(await _fetch_user(pool, user_id))}


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
