"""``/admin/users``: accounts and their API tokens (admins only).

* ``GET /admin/users`` — every user with their admin flag, state, live sessions and live API tokens, and
  the form to create one;
* ``POST /admin/users`` — create a user (a blank password is generated and shown once);
* ``POST /admin/users/{id}/{make-admin,revoke-admin,disable,enable,unlock}`` — an admin cannot revoke
  their own admin rights or disable themselves (409, kept in the audit trail as refused); ``unlock``
  forgets a locked account's failed sign-ins (:mod:`app.signin`);
* ``POST /admin/users/{id}/reset-password`` — a one-time password, shown once; the user must change it
  at their next sign-in (their sessions end);
* ``POST /admin/users/{id}/tokens`` and ``POST /admin/tokens/{id}/revoke`` — issue (the plaintext is
  shown once) and revoke API tokens.

The list pages by email (``?after=<last email shown>``), :data:`app.users.USERS_LIMIT` users a page.

The changes themselves, their audit entries and admin notices are :mod:`app.actions.users`; this module
reads the forms and renders.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Template
from sqlalchemy.ext.asyncio import AsyncSession

from app import auth, quotas, signin, users
from app.actions import trail
from app.actions import users as user_actions
from app.errors import BadInput, Conflict
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.web import DbSession, confirms, flash, render
from app.web.deps import actor_of, client_ip, sentence, settings_of
from app.web.form_shape import form_errors
from app.web.form_values import NOT_A_CHECKBOX, checkbox, typed_values
from app.web.input_guard import FORM_CHECKED

USER_ACTIONS = {
    "make-admin": "user.make_admin",
    "revoke-admin": "user.revoke_admin",
    "disable": "user.disable",
    "enable": "user.enable",
    "unlock": "user.unlock",
}
"""The per-user buttons (path suffix) and the audit action each one records."""


async def users_context(
    db: AsyncSession, settings: Any = None, *, after: str = "", page_size: int = users.USERS_LIMIT
) -> dict[str, Any]:
    rows, next_after = page_of(
        await users.list_users(db, page_size + 1, after=after), page_size, lambda r: r["email"]
    )
    return {
        "users": rows,
        "usage": await quotas.usage_of(db, [u["id"] for u in rows]),
        "limits": quotas.limits(settings) if settings is not None else {},
        "more_users": next_after is not None,
        "after": after,
        "next_after": next_after,
        "errors": {},
        "token_form": None,
        "values": {"email": "", "is_admin": False},
        "notice": None,
        "notice_ok": True,
        "secret": None,
        "min_password": auth.MIN_PASSWORD_LENGTH,
        "max_password": auth.MAX_PASSWORD_LENGTH,
        "lock_minutes": int(signin.LOGIN_WINDOW.total_seconds() // 60),
        "confirms": confirms,
    }


def unlock_words(unlocked: user_actions.Unlocked) -> str:
    """What an unlock did, in words (the page's notice, the command line's answer)."""
    n = unlocked.cleared
    return f"{unlocked.email} can sign in again: {n} failed attempt{'s' if n != 1 else ''} forgotten."


class UsersController(Controller):
    """``/admin/users`` and ``/admin/tokens`` (see the module docstring); admins only."""

    path = "/admin"
    guards = [auth.requires_admin]
    include_in_schema = False

    @get("/users", name="admin.users")
    async def users_page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        after: Annotated[str, QueryParameter()] = "",
    ) -> Template:
        """Users with their admin flag, state, last sign-in, sessions and live API tokens, and the create
        form; ``after`` pages on (the users whose email sorts after it)."""
        ctx = await users_context(
            db_session, settings_of(request), after=read_cursor(after, Cursor.EMAIL) or ""
        )
        return render(request, "admin/users.html", ctx)

    @post("/users", name="admin.users.create", status_code=200, opt={FORM_CHECKED: True})
    async def create_user(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """Create a user; a blank password is generated and shown once. Errors next to the fields (422)."""
        form = await request.form()
        email = str(form.get("email") or "")
        ticked = checkbox(form.get("is_admin"))
        make_admin = bool(ticked)
        errors = form_errors(request, form, ("email", "password", "is_admin"), "email")
        if ticked is None:
            errors.setdefault("is_admin", NOT_A_CHECKBOX)
        if errors:
            # refused by the form's own checks before the action was asked, audited as its refusal
            await trail.refused_form(
                db_session, actor_of(request), "user.create", errors, target_type="user", target_ids=[]
            )
        else:
            try:
                new = await user_actions.create_user(
                    db_session,
                    request.user,
                    email=email,
                    password=str(form.get("password") or ""),
                    is_admin=make_admin,
                    ip=client_ip(request),
                )
            except BadInput as exc:
                errors = dict(exc.errors) or {"email": exc.detail}
            except Conflict as exc:
                errors = {"email": exc.detail}
        ctx = await users_context(db_session, settings_of(request))
        if errors:
            ctx.update(errors=errors, values={**typed_values(form, ("email",)), "is_admin": make_admin})
            return render(request, "admin/users.html", ctx, status_code=422)
        ctx["notice"] = f"Created {new.user.email}" + (" (admin)." if make_admin else ".")
        if new.password is not None:
            ctx["secret"] = {"label": f"Password for {new.user.email}", "value": new.password}
        return render(request, "admin/users.html", ctx)

    @post([f"/users/{{user_id:int}}/{a}" for a in USER_ACTIONS], name="admin.users.action", status_code=200)
    async def user_action(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> Template | Redirect:
        """Make/revoke admin, disable (ends their sessions; tokens stop working), enable or unlock a user.
        Your own admin flag and account are refused with 409 (recorded as refused)."""
        action = request.url.path.rstrip("/").rsplit("/", 1)[1]
        ip = client_ip(request)
        try:
            if action == "unlock":
                unlocked = await user_actions.unlock_sign_in(db_session, request.user, user_id, ip=ip)
                return flash.redirect(request, "/admin/users", unlock_words(unlocked))
            if action in ("make-admin", "revoke-admin"):
                target = await user_actions.set_admin(
                    db_session, request.user, user_id, action == "make-admin", ip=ip
                )
            else:
                # the action first: an unknown id is its refusal (404), audited as every refusal is
                await user_actions.set_active(db_session, request.user, user_id, action == "enable", ip=ip)
                target = await users.get_user(db_session, user_id)
        except Conflict as exc:
            ctx = await users_context(db_session, settings_of(request))
            ctx.update(notice=exc.detail, notice_ok=False)
            return render(request, "admin/users.html", ctx, status_code=409)
        email = target["email"]
        words = {
            "make-admin": f"{email} is now an admin.",
            "revoke-admin": f"{email} is no longer an admin.",
            "disable": f"{email} is disabled: signed out everywhere; sign-in and API tokens refused.",
            "enable": f"{email} can sign in again.",
        }
        return flash.redirect(request, "/admin/users", words[action])

    @post("/users/{user_id:int}/reset-password", name="admin.users.reset_password", status_code=200)
    async def reset_password(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> Template:
        """A one-time password for the user, shown once on the page that answers; they must change it at
        their next sign-in. Your own account is refused with 409 (recorded as refused)."""
        try:
            reset = await user_actions.reset_password(
                db_session, request.user, user_id, ip=client_ip(request)
            )
        except Conflict as exc:
            ctx = await users_context(db_session, settings_of(request))
            ctx.update(notice=exc.detail, notice_ok=False)
            return render(request, "admin/users.html", ctx, status_code=409)
        ctx = await users_context(db_session, settings_of(request))
        ended = reset.sessions_ended
        ctx["notice"] = (
            f"Password of {reset.email} reset: {ended} session{'s' if ended != 1 else ''} signed out. "
            "They must choose a new password when they sign in with this one."
        )
        ctx["secret"] = {"label": f"One-time password for {reset.email}", "value": reset.password}
        return render(request, "admin/users.html", ctx)

    @post("/users/{user_id:int}/tokens", name="admin.users.token", status_code=200, opt={FORM_CHECKED: True})
    async def issue_token(
        self, request: Request[Any, Any, Any], db_session: DbSession, user_id: FromPath[int]
    ) -> Template:
        """Issue an API token for the user; the plaintext is shown once on the page that answers. A name
        that cannot be taken is a 422 with the error beside that user's name field, as typed."""
        form = await request.form()
        name = str(form.get("name") or "")
        errors = form_errors(request, form, ("name",), "name")
        if errors:
            await trail.refused_form(
                db_session,
                actor_of(request),
                "token.create",
                errors,
                target_type="user",
                target_ids=[user_id],
            )
        else:
            try:
                issued = await user_actions.issue_token(
                    db_session, request.user, user_id, name, ip=client_ip(request)
                )
            except BadInput as exc:
                errors = {"name": sentence(exc.errors.get("name") or exc.detail)}
        ctx = await users_context(db_session, settings_of(request))
        if errors:
            ctx["token_form"] = {"user_id": user_id, **typed_values(form, ("name",)), "errors": errors}
            return render(request, "admin/users.html", ctx, status_code=422)
        ctx["notice"] = f"API token issued for {issued.user_email}."
        ctx["secret"] = {"label": f"API token for {issued.user_email}", "value": issued.token}
        return render(request, "admin/users.html", ctx)

    @post("/tokens/{token_id:int}/revoke", name="admin.tokens.revoke", status_code=200)
    async def revoke_token(
        self, request: Request[Any, Any, Any], db_session: DbSession, token_id: FromPath[int]
    ) -> Redirect:
        """Revoke an API token (any user's)."""
        await user_actions.revoke_token(db_session, request.user, token_id, ip=client_ip(request))
        return flash.redirect(request, "/admin/users", "API token revoked.")
