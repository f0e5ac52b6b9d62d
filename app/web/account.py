"""``/account``: a person's own account — password, time zone, colour theme, personal API tokens, and a
link to the API's documentation.

* ``GET /account`` — the page; ``#password`` is the password form (where a person whose password an
  administrator reset is sent until they choose a new one);
* ``POST /account/password`` — change the password (current one required); every OTHER browser session
  of theirs is signed out, this one and their API tokens stay;
* ``POST /account/timezone``, ``POST /account/theme`` — set the zone every time is shown in, and light,
  dark or the browser's choice;
* ``POST /account/tokens`` — create a token (name, optional days until it expires); the plaintext is
  shown once, with a copy button; ``POST /account/tokens/{id}/revoke`` — revoke one.

The changes and their audit entries are :mod:`app.actions.account` (the JSON API's ``/api/me…`` calls
the same actions); this module reads the forms and renders. Errors are shown next to their fields (422),
text that cannot be stored too and a field the form has not or one sent twice (``FORM_CHECKED``:
:func:`app.web.form_shape.form_errors`), with what was typed kept (never a password).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from app import auth, notifications, tokens
from app.actions import account as account_actions
from app.errors import BadInput
from app.formatting import isolated
from app.web import DbSession, flash, render
from app.web.deps import client_ip, settings_of
from app.web.form_shape import form_errors
from app.web.form_values import typed_values, whole_number
from app.web.input_guard import FORM_CHECKED

PASSWORD_FIELDS = ("current_password", "password", "password_repeat")
TOKEN_FIELDS = ("name", "expires_in_days")

THEME_WORDS = {"auto": "Automatic (follow this device)", "light": "Light", "dark": "Dark"}


async def account_context(db: AsyncSession, user: Any) -> dict[str, Any]:
    return {
        "tokens": await tokens.user_tokens(db, user.id),
        "themes": THEME_WORDS,
        "min_password": auth.MIN_PASSWORD_LENGTH,
        "max_password": auth.MAX_PASSWORD_LENGTH,
        "max_token_days": account_actions.MAX_TOKEN_DAYS,
        "errors": {},
        "values": {"timezone": user.timezone, "token_name": "", "expires_in_days": ""},
        "notice": None,
        "notice_ok": True,
        "secret": None,
        "must_change": user.must_change_password,
    }


async def account_page(
    request: Request[Any, Any, Any], db: AsyncSession, status_code: int = 200, **extra: Any
) -> Template:
    """The account page, with ``extra`` in its context (``values`` merged into what the forms show)."""
    ctx = await account_context(db, request.user)
    # the e-mail switch (account/_notifications.html) shows what is saved, and says when this server
    # has no mail server, as /notifications does
    ctx["email_on"] = await notifications.email_choice(db, request.user.id)
    ctx["smtp"] = bool(settings_of(request).smtp_host)
    # where the e-mail form returns: this page, also when a POST to another address rendered it
    ctx["next"] = "/account"
    values = {**ctx["values"], **extra.pop("values", {})}
    ctx.update(extra, values=values)
    return render(request, "account/index.html", ctx, status_code=status_code)


def _days(value: str) -> int | None:
    """The "expires after N days" field: empty means never.

    Raises:
        BadInput: (field ``expires_in_days``) not a whole number.
    """
    if not value.strip():
        return None
    days = whole_number(value)
    if days is None or not 0 <= days < 10**6:
        raise BadInput.field(
            "expires_in_days",
            f"Give a number of days from 1 to {account_actions.MAX_TOKEN_DAYS}, or leave it empty.",
        )
    return days


class AccountController(Controller):
    """``/account`` (see the module docstring); any signed-in person, for their own account only."""

    path = "/account"
    guards = [auth.requires_user]
    include_in_schema = False

    async def _page(
        self, request: Request[Any, Any, Any], db: AsyncSession, status_code: int = 200, **extra: Any
    ) -> Template:
        return await account_page(request, db, status_code, **extra)

    @get("/", name="account")
    async def page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
    ) -> Template:
        """The account page (a notice an action left shows once: :mod:`app.web.flash`)."""
        return await self._page(request, db_session)

    @post("/password", name="account.password", status_code=200, opt={FORM_CHECKED: True})
    async def change_password(
        self, request: Request[Any, Any, Any], db_session: DbSession
    ) -> Template | Redirect:
        """Change the password; other sessions end. Wrong current password, a short or repeated new one:
        422 with the message next to the field."""
        form = await request.form()
        refused = form_errors(request, form, PASSWORD_FIELDS, "password")
        if refused:
            return await self._page(request, db_session, 422, errors=refused)
        try:
            changed = await account_actions.change_password(
                db_session,
                request.user,
                current=str(form.get("current_password") or ""),
                new=str(form.get("password") or ""),
                repeat=str(form.get("password_repeat") or ""),
                keep_session=auth.session_hash_of(request.scope),
                ip=client_ip(request),
            )
        except BadInput as exc:
            return await self._page(
                request, db_session, 422, errors=dict(exc.errors) or {"password": exc.detail}
            )
        n = changed.sessions_ended
        others = (
            f"{n} other session{'s' if n != 1 else ''} signed out" if n else "no other session was signed in"
        )
        return flash.redirect(request, "/account", f"Password changed; {others}.")

    @post("/timezone", name="account.timezone", status_code=200, opt={FORM_CHECKED: True})
    async def set_timezone(
        self, request: Request[Any, Any, Any], db_session: DbSession
    ) -> Template | Redirect:
        """Set the time zone (an IANA name); an unknown one is a 422 next to the field, as typed."""
        form = await request.form()
        typed = str(form.get("timezone") or "")
        refused = form_errors(request, form, ("timezone",), "timezone")
        if refused:
            return await self._page(request, db_session, 422, errors=refused, values={"timezone": typed[:64]})
        try:
            zone = await account_actions.set_timezone(db_session, request.user, typed, ip=client_ip(request))
        except BadInput as exc:
            return await self._page(
                request, db_session, 422, errors=dict(exc.errors), values={"timezone": typed[:64]}
            )
        if not zone.changed:
            return flash.redirect(
                request, "/account", f"Times were already shown in {zone.value}: nothing changed."
            )
        return flash.redirect(request, "/account", f"Times are now shown in {zone.value}.")

    @post("/theme", name="account.theme", status_code=200, opt={FORM_CHECKED: True})
    async def set_theme(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template | Redirect:
        """Light, dark or automatic (the device's setting)."""
        form = await request.form()
        refused = form_errors(request, form, ("theme",), "theme")
        if refused:
            return await self._page(request, db_session, 422, errors=refused)
        try:
            theme = await account_actions.set_theme(
                db_session, request.user, str(form.get("theme") or ""), ip=client_ip(request)
            )
        except BadInput as exc:
            return await self._page(request, db_session, 422, errors=dict(exc.errors))
        words = THEME_WORDS[theme.value].lower()
        if not theme.changed:
            return flash.redirect(request, "/account", f"Colours were already {words}: nothing changed.")
        return flash.redirect(request, "/account", f"Colours: {words}.")

    @post("/tokens", name="account.tokens.create", status_code=200, opt={FORM_CHECKED: True})
    async def create_token(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Create an API token; the page that answers shows it once."""
        form = await request.form()
        name = str(form.get("name") or "")
        days = str(form.get("expires_in_days") or "")
        shown = typed_values(form, ("name", "expires_in_days"))
        typed = {"token_name": shown["name"], "expires_in_days": shown["expires_in_days"]}
        refused = form_errors(request, form, TOKEN_FIELDS, "name")
        if refused:
            return await self._page(request, db_session, 422, errors=refused, values=typed)
        try:
            token = await account_actions.create_token(
                db_session, request.user, name, expires_in_days=_days(days), ip=client_ip(request)
            )
        except BadInput as exc:
            return await self._page(request, db_session, 422, errors=dict(exc.errors), values=typed)
        return await self._page(
            request,
            db_session,
            # the name is set apart: one holding U+202E would reverse "” created." after it
            notice=f"API token “{isolated(token.name)}” created.",
            secret={"label": f"Your new API token “{isolated(token.name)}”", "value": token.token},
        )

    @post("/tokens/{token_id:int}/revoke", name="account.tokens.revoke", status_code=200)
    async def revoke_token(
        self, request: Request[Any, Any, Any], db_session: DbSession, token_id: FromPath[int]
    ) -> Redirect:
        """Revoke one of your tokens (404 for anyone else's)."""
        await account_actions.revoke_token(db_session, request.user, token_id, ip=client_ip(request))
        return flash.redirect(request, "/account", "API token revoked: programs using it stop working.")
