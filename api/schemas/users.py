"""Users and logins."""

from __future__ import annotations

from api.schemas import Answer, Pagination


class AgentUserGroup(Answer):
    """Determined's v1AgentUserGroup: who a user's runs are on agents."""

    agentUid: int
    agentGid: int
    agentUser: str
    agentGroup: str


class User(Answer):
    """Determined's v1User."""

    id: int
    username: str
    displayName: str
    admin: bool
    active: bool
    modifiedAt: str
    agentUserGroup: AgentUserGroup | None = None


class UserAnswer(Answer):
    """Determined's v1GetUserResponse (and the answers of the routes that change a user)."""

    user: User


class UserList(Answer):
    """Determined's v1GetUsersResponse."""

    users: list[User]
    pagination: Pagination


class LoginAnswer(Answer):
    """Determined's v1LoginResponse."""

    token: str
    user: User


class TokenInfo(Answer):
    """Determined's v1TokenInfo (an access token, never its value)."""

    id: int
    userId: int
    description: str
    createdAt: str
    expiry: str
    revoked: bool
    tokenType: str


class TokenList(Answer):
    """Determined's v1GetAccessTokensResponse."""

    tokenInfo: list[TokenInfo]
    pagination: Pagination


class TokenCreated(Answer):
    """Determined's v1PostAccessTokenResponse: the token, shown this once."""

    token: str
    tokenId: int


class TokenPatched(Answer):
    """Determined's v1PatchAccessTokenResponse."""

    tokenInfo: TokenInfo
