"""Who is calling, and what they may do: user sessions, the agents' cluster token, trial tokens.

Every API route depends on `authorize` (wired in api/app.py), which resolves the token and
applies the route's rule from api/access.py (who may call it: users, owners, admins, agents, a
trial's own token). Routes whose body names what they change check it themselves with
`require_trial_write` / `require_owner`.

Passwords are hashed the way Determined's client sends them (salted SHA-512, `isHashed`), then
with argon2id; session tokens and access tokens (`det token create`: long-lived, revocable, each
with an id) are random and stored only as their SHA-256. An access token acts as its user
exactly as a session does, until it expires or is revoked.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Literal

import asyncpg
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from api import access
from api.errors import ApiError
from api.queries import owners
from api.queries import users as user_queries
from api.settings import Settings
from common.states import TrialState
from common.tokens import TrialRun, verify_trial_token

# Determined's client-side salt (determined.common.api.authentication.PASSWORD_SALT): a password
# hashed with it is what `det user login` sends, so the server stores the same form for everyone.
DETERMINED_PASSWORD_SALT = "GubPEmmotfiK9TMD6Zdw"
SESSION_TOKEN_PREFIX = "eps"
ACCESS_TOKEN_PREFIX = "epa"
# Determined's defaults are 30 days for both; Epochal lets a token live up to a year.
ACCESS_TOKEN_DEFAULT_DAYS = 30
ACCESS_TOKEN_MAX_DAYS = 365
MAX_ACCESS_TOKENS_PER_USER = 100  # live ones (neither revoked nor expired)
AUTH_COOKIE = "auth"
MIN_PASSWORD_LENGTH = 8

READ_METHODS = frozenset({"GET", "HEAD"})

_hasher = PasswordHasher()


@dataclass(frozen=True)
class Principal:
    kind: Literal["user", "agent", "trial"]
    user_id: int | None = None
    username: str | None = None
    admin: bool = False
    trial_id: int | None = None
    session_hash: bytes | None = None

    def describe(self) -> str:
        if self.kind == "user":
            return f"user {self.username}"
        if self.kind == "trial":
            return f"the token of trial {self.trial_id}"
        return "the cluster token"


def salted_password(password: str) -> str:
    """What Determined's client sends for `password` (empty stays empty, as there)."""
    if not password:
        return password
    return hashlib.sha512((DETERMINED_PASSWORD_SALT + password).encode()).hexdigest()


async def hash_password(password: str, *, is_hashed: bool) -> str:
    if not is_hashed and len(password) < MIN_PASSWORD_LENGTH:
        raise ApiError(
            400,
            "password too short",
            [f"password: at least {MIN_PASSWORD_LENGTH} characters expected"],
        )
    if is_hashed and not password:
        raise ApiError(400, "empty password", ["password: a non-empty password expected"])
    prepared = password if is_hashed else salted_password(password)
    return await run_in_threadpool(_hasher.hash, prepared)


@functools.cache
def _no_user_hash() -> str:
    """Checked against when the user does not exist, so that an unknown name costs the same
    argon2 verification as a wrong password and the answer's timing does not tell names apart.
    Made at the first such login, not at import: a hash is 0.2 s of CPU, and every master (and
    every process that imports the API) paid it when it started."""
    return PasswordHasher().hash(secrets.token_urlsafe(16))


async def password_matches(stored_hash: str | None, password: str, *, is_hashed: bool) -> bool:
    if not password:
        return False
    prepared = password if is_hashed else salted_password(password)
    try:
        matches = bool(await run_in_threadpool(
            lambda: _hasher.verify(stored_hash or _no_user_hash(), prepared)))
    except (VerificationError, InvalidHashError):
        return False
    return matches and stored_hash is not None


class LoginThrottle:
    """Failed logins counted per (username, address) and per address over a sliding window;
    past either bound, logins from there are refused until old failures age out. A success
    clears its pair. Bounded: at most `max_keys` counters are kept (the oldest go first)."""

    def __init__(self, *, per_user: int = 10, per_address: int = 100, window: float = 300.0,
                 max_keys: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_user, self.per_address, self.window = per_user, per_address, window
        self.max_keys, self.clock = max_keys, clock
        self._failures: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()

    def retry_after(self, username: str, address: str) -> float | None:
        """Seconds until a login of `username` from `address` may be tried, or None."""
        waits = [self._wait((username, address), self.per_user),
                 self._wait(("", address), self.per_address)]
        found = [w for w in waits if w is not None]
        return max(found) if found else None

    def failed(self, username: str, address: str) -> None:
        now = self.clock()
        for key in ((username, address), ("", address)):
            self._failures.setdefault(key, deque()).append(now)
            self._failures.move_to_end(key)
        while len(self._failures) > self.max_keys:
            self._failures.popitem(last=False)

    def succeeded(self, username: str, address: str) -> None:
        self._failures.pop((username, address), None)

    def _wait(self, key: tuple[str, str], bound: int) -> float | None:
        times = self._failures.get(key)
        if times is None:
            return None
        horizon = self.clock() - self.window
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        if len(times) < bound:
            return None
        return times[-bound] - horizon


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


async def open_session(pool: asyncpg.Pool, user_id: int, ttl: timedelta) -> str:
    token = f"{SESSION_TOKEN_PREFIX}.{secrets.token_urlsafe(32)}"
    await user_queries.insert_session(pool, _digest(token), user_id, ttl)
    return token


async def open_run_session(pool: asyncpg.Pool, user_id: int, ttl: timedelta,
                           table: Literal["trials", "tasks"], run_id: int | str) -> str:
    """A session of the user for a trial's running run or a task's code (DET_USER_TOKEN): it
    replaces, and revokes, the one the run had before."""
    token = await open_session(pool, user_id, ttl)
    replaced = await user_queries.replace_run_session(pool, table, run_id, _digest(token))
    if replaced is not None:
        await user_queries.delete_session(pool, replaced)
    return token


async def create_access_token(conn: asyncpg.Connection, user_id: int, lifespan: timedelta,
                              description: str) -> tuple[int, str]:
    """A new access token of the user (its id, and the token, which is never stored)."""
    token = f"{ACCESS_TOKEN_PREFIX}.{secrets.token_urlsafe(32)}"
    token_id = await user_queries.insert_access_token(conn, user_id, _digest(token), lifespan,
                                                      description)
    return token_id, token


async def close_session(pool: asyncpg.Pool, principal: Principal) -> None:
    if principal.session_hash is not None:
        await user_queries.delete_session(pool, principal.session_hash)


async def ensure_admin_password(pool: asyncpg.Pool, password: str | None) -> None:
    """Give `admin` the configured password if it has none yet (a later change is kept)."""
    if not password:
        return
    stored = await hash_password(password, is_hashed=False)
    await user_queries.set_initial_admin_password(pool, stored)


# Determined's Core API (api.TaskSession) sends its task token under this header instead.
DETERMINED_TASK_TOKEN_HEADER = "grpc-metadata-x-allocation-token"


async def _check_run_is_live(pool: asyncpg.Pool, named: TrialRun) -> None:
    """A trial token is good only while its run is the trial's current, running one and the
    experiment's owner is active: this fences finished runs and orphaned processes."""
    row = await user_queries.fetch_trial_run_state(pool, named.trial_id)
    if row is None:
        raise ApiError(401, f"trial token for trial {named.trial_id}, which does not exist")
    if row["run_id"] != named.run_id or row["state"] != TrialState.RUNNING:
        raise ApiError(401, f"trial token for run {named.run_id} of trial {named.trial_id}, "
                       "which is over")
    if row["active"] is False:
        raise ApiError(403, f"trial token of trial {named.trial_id}, whose owner is "
                       "deactivated")


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization") or request.headers.get(
        DETERMINED_TASK_TOKEN_HEADER
    )
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiError(401, "malformed Authorization header: expected 'Bearer <token>'")
        return value.strip()
    if request.method in READ_METHODS or (
            (request.method, _route_path(request)) in access.COOKIE_POSTS):
        return request.cookies.get(AUTH_COOKIE) or None
    return None


async def _resolve(token: str, pool: asyncpg.Pool, settings: Settings) -> Principal:
    if token.startswith("ept."):
        named = verify_trial_token(settings.cluster_token, token)
        if named is None:
            raise ApiError(401, "invalid trial token")
        await _check_run_is_live(pool, named)
        return Principal("trial", trial_id=named.trial_id)
    if hmac.compare_digest(token.encode(), settings.cluster_token.encode()):
        return Principal("agent")
    digest = _digest(token)
    if token.startswith(f"{ACCESS_TOKEN_PREFIX}."):
        row = await user_queries.fetch_access_token_user(pool, digest)
        if row is None:
            raise ApiError(401, "invalid access token")
        if row["revoked"]:
            raise ApiError(401, f"access token {row['token_id']} is revoked")
        if row["expired"]:
            raise ApiError(401, f"access token {row['token_id']} expired")
    else:
        row = await user_queries.fetch_session_user(pool, digest)
        if row is None:
            raise ApiError(401, "invalid or revoked token: log in again (`epochal user login`)")
        if row["expired"]:
            raise ApiError(401, "token expired: log in again (`epochal user login`)")
    if not row["active"]:
        raise ApiError(403, f"user {row['username']} is deactivated")
    return Principal(
        "user",
        user_id=row["id"],
        username=row["username"],
        admin=row["admin"],
        session_hash=None if token.startswith(f"{ACCESS_TOKEN_PREFIX}.") else digest,
    )


def _route_path(request: Request) -> str:
    route = request.scope.get("route")
    return str(getattr(route, "path", request.url.path))


# Declares the scheme in the OpenAPI schema; `_bearer` does the parsing (and the cookie).
_bearer_scheme = HTTPBearer(auto_error=False, description="A session, cluster or trial token")


async def authorize(
    request: Request,
    _declared: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)] = None,
) -> Principal | None:
    """Resolve the caller's token and refuse what its route's rule (api/access.py) does not
    let it do, before the route reads its body."""
    method, path = request.method, _route_path(request)
    rule = access.rule_of(method, path)
    if rule is None:  # the app does not start with such a route (api/app.py)
        raise ApiError(403, f"{method} {path} has no access rule")
    if rule is access.Rule.PUBLIC:
        return None
    token = _bearer(request)
    if token is None:
        raise ApiError(
            401,
            "not logged in: send 'Authorization: Bearer <token>'"
            " (log in with `epochal user login` or POST /api/v1/auth/login)",
        )
    app_state = request.app.state
    principal = await _resolve(token, app_state.pool, app_state.settings)
    request.state.principal = principal
    await _check_rule(request, principal, rule, f"{method} {path}")
    return principal


async def _check_rule(request: Request, principal: Principal, rule: access.Rule,
                      route: str) -> None:
    Rule = access.Rule  # noqa: N806 (the enum, read as a namespace)
    if rule in (Rule.ANY, Rule.BODY):
        return
    if principal.kind == "agent":
        if rule in (Rule.TEAM, Rule.FILES, Rule.AGENT, Rule.RUNS, Rule.REPORT):
            return
        raise ApiError(403, f"the cluster token may not call {route}")
    if principal.kind == "trial":
        assert principal.trial_id is not None
        if rule is Rule.PERSON:
            return
        if rule is Rule.TEAM and await access.trial_may_read(request, principal.trial_id):
            return
        if rule is Rule.FILES and await access.trial_may_read_files(request,
                                                                     principal.trial_id):
            return
        if rule is Rule.REPORT and access.trial_named(request.path_params) == principal.trial_id:
            return
        raise ApiError(403, f"{principal.describe()} may not call {route}: a trial token "
                       f"reads and writes only its own trial {principal.trial_id}")
    if rule is Rule.RUNS:
        raise ApiError(403, f"only agents (the cluster token) may call {route}")
    if principal.admin or rule in (Rule.PERSON, Rule.TEAM, Rule.USER):
        return
    if rule is Rule.SELF:
        if str(request.path_params.get("user_id")) != str(principal.user_id):
            raise ApiError(403, f"user {principal.username} may change only their own account")
        return
    if rule in (Rule.OWNER, Rule.REPORT, Rule.FILES):
        owner = await access.owner_named(request)
        if owner is not None and owner != principal.username:
            raise ApiError(403, f"user {principal.username} may not call {route} on what "
                           f"belongs to {owner}")
        return
    who = "admins" if rule is Rule.ADMIN else "agents (the cluster token)"
    raise ApiError(403, f"only {who} may call {route} ({principal.describe()} may not)")


def current(request: Request) -> Principal:
    principal = getattr(request.state, "principal", None)
    if principal is None:
        raise ApiError(401, "not logged in")
    return principal  # type: ignore[no-any-return]


CurrentPrincipal = Annotated[Principal, Depends(current)]


def require_admin(principal: Principal, action: str) -> None:
    if not (principal.kind == "user" and principal.admin):
        raise ApiError(403, f"only an admin may {action} ({principal.describe()} is not one)")


def require_agent(principal: Principal, action: str) -> None:
    if principal.kind != "agent":
        raise ApiError(403, f"only agents (the cluster token) may {action}"
                       f" ({principal.describe()} is not one)")


def require_user(principal: Principal, action: str) -> Principal:
    if principal.kind != "user":
        raise ApiError(403, f"{principal.describe()} may not {action}: log in as a user")
    return principal


async def require_owner(request: Request, experiment_id: int, action: str) -> None:
    """Only the experiment's owner or an admin may change it."""
    principal = require_user(current(request), action)
    if principal.admin:
        return
    owner = await owners.experiment_owner(request.app.state.pool, experiment_id)
    if owner is not None and owner != principal.username:
        raise ApiError(
            403,
            f"user {principal.username} may not {action} experiment {experiment_id},"
            f" which belongs to {owner}",
        )


async def require_trial_write(request: Request, trial_id: int) -> None:
    """Trial tokens write their own trial only; users the trials of their experiments."""
    principal = current(request)
    if principal.kind == "agent" or (principal.kind == "user" and principal.admin):
        return
    if principal.kind == "trial":
        if principal.trial_id != trial_id:
            raise ApiError(
                403, f"{principal.describe()} may not write reports of trial {trial_id}"
            )
        return
    owner = await owners.trial_owner(request.app.state.pool, trial_id)
    if owner is not None and owner != principal.username:
        raise ApiError(
            403, f"user {principal.username} may not write reports of trial {trial_id}"
        )
