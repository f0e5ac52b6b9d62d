"""Cross-site request forgery: every form post and htmx request outside ``/api/`` carries a token that
only a page of this site, shown to this browser session, can know.

* Signed in: the token is an HMAC, under the server's secret key, of the session's id hash (the
  ``web_sessions`` row). It is bound to that one session: a token or cookie pair taken as an anonymous
  visitor, from another account, or minted by any page that can set cookies for this host (another
  port on the same host can) is refused on this session. A new session — every sign-in — has a new
  token, and signing out ends it.
* Anonymous (the sign-in form): the classic double-submit pair — a random value signed with the key,
  in an HttpOnly cookie and in the form, which must agree.
* Signed in, the ``csrftoken`` cookie is set to the session's token as well, and a post must carry it
  too: defence in depth, should the binding ever be wrong.

The token reaches pages as Litestar's ``csrf_input`` and ``csrf_token()`` (its scope state), is sent as
the ``_csrf_token`` form field or the ``X-CSRFToken`` header (htmx), and a refusal is a 403 saying that
nothing was changed. Safe methods (GET, HEAD, OPTIONS) are never refused.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from litestar.datastructures import MutableScopeHeaders
from litestar.datastructures.cookie import Cookie
from litestar.enums import RequestEncodingType, ScopeType
from litestar.exceptions import PermissionDeniedException
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from litestar.utils.scope.state import ScopeState

from app.auth import session_hash_of
from app.settings import Settings
from app.web.input_guard import read_form

COOKIE_NAME = "csrftoken"
HEADER_NAME = "x-csrftoken"
FORM_FIELD = "_csrf_token"
FAILED = "CSRF token verification failed"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

_SESSION_PURPOSE = b"jobdesk csrf for session\x00"
_ANON_PURPOSE = b"jobdesk csrf for an anonymous visitor\x00"
_ANON_NONCE_HEX = 32
_PASSED = "jobdesk.csrf_passed"
"""Scope key set once a request's CSRF check has passed (:func:`vouched`)."""


def _mac(secret: str, purpose: bytes, value: str) -> str:
    return hmac.new(secret.encode(), purpose + value.encode(), hashlib.sha256).hexdigest()


def session_token(secret: str, session_hash: str) -> str:
    """The token of the session whose ``web_sessions.id_hash`` is ``session_hash``."""
    return "s" + _mac(secret, _SESSION_PURPOSE, session_hash)


def session_token_for_cookie(secret: str, session_cookie: str) -> str:
    """The token of the session whose cookie value is ``session_cookie`` (just created at sign-in)."""
    return session_token(secret, hashlib.sha256(session_cookie.encode()).hexdigest())


def new_anonymous_token(secret: str) -> str:
    """A fresh double-submit value for a visitor who is not signed in."""
    nonce = secrets.token_hex(_ANON_NONCE_HEX // 2)
    return "a" + nonce + _mac(secret, _ANON_PURPOSE, nonce)


def valid_anonymous_token(secret: str, token: str | None) -> bool:
    """Whether ``token`` is a double-submit value this server signed (for anonymous visitors only)."""
    if not token or not token.startswith("a") or len(token) != 1 + _ANON_NONCE_HEX + 64:
        return False
    nonce, mac = token[1 : 1 + _ANON_NONCE_HEX], token[1 + _ANON_NONCE_HEX :]
    return hmac.compare_digest(mac, _mac(secret, _ANON_PURPOSE, nonce))


def _same(a: str | None, b: str | None) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(str(a).encode(), str(b).encode())


def csrf_cookie(token: str, *, secure: bool, max_age: timedelta | None) -> Cookie:
    """The ``csrftoken`` cookie: HttpOnly (pages carry the token; no script reads the cookie), Lax."""
    return Cookie(
        key=COOKIE_NAME,
        value=token,
        path="/",
        secure=secure,
        httponly=True,
        samesite="lax",
        max_age=int(max_age.total_seconds()) if max_age else None,
    )


def scope_cookie(scope: Scope, name: str) -> str | None:
    """The value of cookie ``name`` in the request of ``scope``, or ``None``."""
    prefix = name + "="
    for key, value in scope["headers"]:
        if key == b"cookie":
            for part in value.decode("latin-1").split(";"):
                part = part.strip()
                if part.startswith(prefix):
                    return part[len(prefix) :]
    return None


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


class CsrfMiddleware(ASGIMiddleware):
    """Checks the token of every unsafe request outside ``exclude`` and hands pages their token (see the
    module docstring). Runs after :class:`app.web.auth_middleware.AuthenticationMiddleware`, which finds the signed-in
    session (:func:`app.auth.session_hash_of`)."""

    scopes = (ScopeType.HTTP,)

    def __init__(self, *, exclude: Sequence[str]) -> None:
        self.exclude = re.compile("|".join(exclude)) if exclude else None
        self._settings: Settings | None = None
        self._secret = ""

    def _secret_of(self, settings: Settings) -> str:
        # read from the data directory when SECRET_KEY is unset: once per settings, not per request
        if settings is not self._settings:
            self._secret = settings.resolved_secret_key()
            self._settings = settings
        return self._secret

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if self.exclude is not None and self.exclude.search(scope["path"]):
            await next_app(scope, receive, send)
            return
        settings: Settings = scope["litestar_app"].state.settings
        secret = self._secret_of(settings)
        cookie = scope_cookie(scope, COOKIE_NAME)
        session_hash = session_hash_of(scope)
        if session_hash:
            expected = session_token(secret, session_hash)
        elif valid_anonymous_token(secret, cookie):
            expected = str(cookie)
        else:
            expected = new_anonymous_token(secret)
        if scope.get("method", "GET") not in SAFE_METHODS:
            submitted = _header(scope, HEADER_NAME.encode()) or await _form_token(scope, receive)
            if not (_same(submitted, expected) and _same(cookie, expected)):
                raise PermissionDeniedException(FAILED)
            scope[_PASSED] = True  # type: ignore[literal-required]
        ScopeState.from_scope(scope).csrf_token = expected
        if cookie == expected:
            await next_app(scope, receive, send)
            return
        max_age = timedelta(days=settings.session_max_age_days) if session_hash else None
        header = csrf_cookie(expected, secure=settings.cookies_secure, max_age=max_age).to_header(header="")

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableScopeHeaders.from_message(message).add("set-cookie", header)
            await send(message)

        await next_app(scope, receive, send_with_cookie)


def vouched(scope: Scope) -> bool:
    """Whether a request is known to come from its signed-in person, as an audit entry of its refusal
    needs (:mod:`app.web.refused_requests`): one not signed in by a session cookie (an API token, which
    no other site can make a browser send), one whose CSRF check passed, or one refused before the check
    could read a token from its body (over the body limit, a form that cannot be parsed) whose
    ``X-CSRFToken`` header — every htmx request sends it — and cookie are its session's token.

    Otherwise the request may be forged: a page of another site on this host (another port) can post a
    form that the browser sends with the session cookie, and an entry would then say the admin did what
    they never asked. A token in the body of a refused request is never read: the body is refused
    because it cannot be read (or should not be, being over the limit)."""
    session_hash = session_hash_of(scope)
    if not session_hash or scope.get(_PASSED):
        return True
    secret = scope["litestar_app"].state.settings.resolved_secret_key()
    expected = session_token(secret, session_hash)
    return _same(_header(scope, HEADER_NAME.encode()), expected) and _same(
        scope_cookie(scope, COOKIE_NAME), expected
    )


async def _form_token(scope: Scope, receive: Receive) -> str | None:
    """The ``_csrf_token`` field of a urlencoded or multipart body (parsed once: the handler reuses it)."""
    request: Any = scope["litestar_app"].request_class(scope=scope, receive=receive)
    content_type, _ = request.content_type
    if content_type not in (RequestEncodingType.URL_ENCODED, RequestEncodingType.MULTI_PART):
        return None
    value = (await read_form(request)).get(FORM_FIELD)
    return value if isinstance(value, str) else None
