"""``/api/me``: the bearer token's owner, their settings and their own API tokens.

* ``GET /api/me`` — who the token belongs to, with their time zone and colour theme;
* ``PUT /api/me`` — change ``timezone`` and/or ``theme`` (the account page's actions);
* ``GET /api/me/tokens`` — their tokens (no secrets); ``POST /api/me/tokens`` and
  ``DELETE /api/me/tokens/{id}`` answer 403: tokens are created and revoked on the account page only
  (:func:`app.tokens.require_signed_in_browser`), so a stolen token can neither outlive its expiry or
  revocation by minting another nor revoke its owner's other tokens.

Password changes are page-only: the API has no session to keep. A person whose password an
administrator reset keeps using their API tokens (they are a separate credential; the browser session
is what waits for the new password).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from litestar import Controller, Request, delete, get, post, put
from litestar.params import FromPath, JSONBody

from app import tokens
from app.actions import account as account_actions
from app.auth import requires_user
from app.web import DbSession
from app.web.deps import client_ip
from app.web.openapi import errors


@dataclass
class Me:
    """The token's owner."""

    id: int
    email: str
    is_admin: bool
    timezone: str
    theme: str


@dataclass
class MeUpdate:
    """Settings to change; a field left out stays as it is."""

    timezone: str | None = None
    theme: str | None = None


@dataclass
class TokenInfo:
    """One of your API tokens, without its secret."""

    id: int
    name: str
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    expires_at: datetime | None
    expired: bool


@dataclass
class TokenCreate:
    """A new token: a name, and optionally the days until it expires (none: until revoked)."""

    name: str
    expires_in_days: int | None = None


@dataclass
class NewToken:
    """A created token: ``token`` is its secret, shown in this answer only."""

    id: int
    name: str
    prefix: str
    token: str
    expires_at: datetime | None


def _me(user: Any, **changes: Any) -> Me:
    return Me(
        id=user.id,
        email=user.email,
        is_admin=user.is_admin,
        timezone=changes.get("timezone", user.timezone),
        theme=changes.get("theme", user.theme),
    )


class AccountApiController(Controller):
    """``/api/me`` and ``/api/me/tokens``."""

    path = "/api"
    guards = [requires_user]
    tags = ["account"]

    @get("/me", name="api.me", responses=errors(401))
    async def me(self, request: Request[Any, Any, Any]) -> Me:
        """The user the bearer token belongs to."""
        return _me(request.user)

    @put("/me", name="api.me.update", status_code=200, responses=errors(401, 413, 415, 422))
    async def update_me(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[MeUpdate]
    ) -> Me:
        """Change your time zone (an IANA name such as Europe/Copenhagen) and/or colour theme (auto, light
        or dark). 422 naming the field for an unknown zone or theme."""
        changes: dict[str, Any] = {}
        ip = client_ip(request)
        if data.timezone is not None:
            zone = await account_actions.set_timezone(db_session, request.user, data.timezone, ip=ip)
            changes["timezone"] = zone.value
        if data.theme is not None:
            theme = await account_actions.set_theme(db_session, request.user, data.theme, ip=ip)
            changes["theme"] = theme.value
        return _me(request.user, **changes)

    @get("/me/tokens", name="api.me.tokens", responses=errors(401))
    async def tokens(self, request: Request[Any, Any, Any], db_session: DbSession) -> list[TokenInfo]:
        """Your API tokens that are not revoked, newest first (expired ones are marked)."""
        return [TokenInfo(**row) for row in await tokens.user_tokens(db_session, request.user.id)]

    @post(
        "/me/tokens", name="api.me.tokens.create", status_code=201, responses=errors(401, 403, 413, 415, 422)
    )
    async def create_token(
        self, request: Request[Any, Any, Any], db_session: DbSession, data: JSONBody[TokenCreate]
    ) -> NewToken:
        """Create an API token: refused with 403 for every request made with a token (which is every API
        request). Tokens are created on the account page (/account), signed in with your password, so
        that a stolen token cannot mint a lasting one."""
        token = await account_actions.create_token(
            db_session, request.user, data.name, expires_in_days=data.expires_in_days, ip=client_ip(request)
        )
        return NewToken(
            id=token.token_id,
            name=token.name,
            prefix=token.prefix,
            token=token.token,
            expires_at=token.expires_at,
        )

    @delete(
        "/me/tokens/{token_id:int}",
        name="api.me.tokens.revoke",
        status_code=204,
        responses=errors(401, 403, 404),
    )
    async def revoke_token(
        self, request: Request[Any, Any, Any], db_session: DbSession, token_id: FromPath[int]
    ) -> None:
        """Revoke a token: refused with 403 for every request made with a token. Revoke tokens on the
        account page (/account), signed in with your password."""
        await account_actions.revoke_token(db_session, request.user, token_id, ip=client_ip(request))
