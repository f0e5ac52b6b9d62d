"""A notice carried from an action to the page it redirects to ("flash"), in a short-lived cookie.

Notices used to travel in the query string (``?done=…``), so anyone could send an admin a link showing a
misleading notice ("All jobs deleted"). Now :func:`redirect` puts the notice in a cookie signed with the
app's secret key and bound to the signed-in session: a link cannot set it, another session cannot use
it, and an edited cookie is ignored. :func:`render_flash` (called by :func:`app.web.render` for every
full page) reads it once and tells the browser to drop it, so a reload shows the page without it.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import base64
import hashlib
import hmac
import json
from typing import Any

from litestar import Request
from litestar.datastructures import Cookie
from litestar.response import Redirect

from app.auth import session_hash_of

COOKIE = "jd_notice"
MAX_AGE = 120
"""Seconds a notice waits for its page (a redirect is followed at once)."""
NOTICE_MAX = 300


def _key(request: Request[Any, Any, Any]) -> bytes:
    settings = request.app.state.settings
    return hashlib.sha256(b"flash:" + settings.resolved_secret_key().encode()).digest()


def _signature(request: Request[Any, Any, Any], body: str) -> str:
    session = session_hash_of(request.scope) or ""
    mac = hmac.new(_key(request), f"{session}\n{body}".encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")


def _cookie(request: Request[Any, Any, Any], value: str, max_age: int) -> Cookie:
    secure = bool(getattr(request.app.state.settings, "cookies_secure", False))
    return Cookie(
        key=COOKIE, value=value, path="/", max_age=max_age, httponly=True, samesite="lax", secure=secure
    )


def cookie_for(request: Request[Any, Any, Any], notice: str, ok: bool = True) -> Cookie:
    """The signed cookie carrying ``notice`` to the next page of this session."""
    payload = json.dumps({"m": notice[:NOTICE_MAX], "ok": bool(ok)}, ensure_ascii=True)
    body = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
    return _cookie(request, f"{body}.{_signature(request, body)}", MAX_AGE)


def redirect(request: Request[Any, Any, Any], path: str, notice: str, *, ok: bool = True) -> Redirect:
    """303 to ``path`` with ``notice`` shown once on the page it lands on; reloading that page neither
    repeats the action nor the notice."""
    return Redirect(path, status_code=303, cookies=[cookie_for(request, notice, ok)])


def read(request: Request[Any, Any, Any]) -> dict[str, Any] | None:
    """The notice waiting for this session, ``{"message", "ok"}``, or ``None`` (none, forged, another
    session's, or damaged)."""
    raw = request.cookies.get(COOKIE)
    if not raw or "." not in raw or len(raw) > 4096:
        return None
    body, sig = raw.rsplit(".", 1)
    # Compared as bytes: compare_digest raises TypeError for text with non-ASCII characters, and any
    # site on the same host name (cookies ignore the port) can set this cookie, so that every page
    # answered 500 until the cookie was gone.
    if not hmac.compare_digest(sig.encode("utf-8", "surrogatepass"), _signature(request, body).encode()):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("m"), str):
        return None
    return {"message": data["m"][:NOTICE_MAX], "ok": bool(data.get("ok", True))}


def render_flash(request: Request[Any, Any, Any]) -> tuple[dict[str, Any] | None, list[Cookie]]:
    """For a full page: the waiting notice and the cookie that clears it (nothing when none waits)."""
    if COOKIE not in request.cookies:
        return None, []
    return read(request), [_cookie(request, "", 0)]
