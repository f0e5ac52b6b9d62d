"""Sign-in and sign-out pages: ``GET/POST /login``, ``POST /logout``.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.params import QueryParameter
from litestar.response import Redirect, Template

from app.auth import PASSWORD_FORM, SESSION_COOKIE, create_session, delete_session, safe_next
from app.errors import RateLimited, Unauthorized
from app.signin import sign_in
from app.web import DbSession, current_user, render
from app.web.csrf import COOKIE_NAME as CSRF_COOKIE
from app.web.csrf import csrf_cookie, session_token_for_cookie
from app.web.form_shape import form_errors
from app.web.input_guard import FORM_CHECKED


@dataclass
class LoginForm:
    """The sign-in form's fields; missing ones count as empty so the page can say what is wrong."""

    email: str = ""
    password: str = ""
    next: str = "/"
    timezone: str = ""
    """The browser's IANA zone, filled in by static/account.js; stored at the first sign-in."""


def read_login(form: Any) -> LoginForm:
    """The sign-in form's fields as sent (a missing one as its default); a file in a field is no text."""
    sent = {f.name: form.get(f.name) for f in fields(LoginForm)}
    return LoginForm(**{name: value for name, value in sent.items() if isinstance(value, str)})


LOGIN_CONTROLS = ("email", "password")
"""The sign-in form's fields a person types in (an error shows beside each); the others are hidden."""


def _client_ip(request: Request[Any, Any, Any]) -> str:
    """The connection's peer: ``jobdesk serve`` puts a proxy's ``X-Forwarded-For`` there only when the
    proxy is listed in ``FORWARDED_ALLOW_IPS`` (sign-in limits count per address)."""
    return request.client.host if request.client else "unknown"


class AuthController(Controller):
    """``/login`` and ``/logout``. Both POSTs need the CSRF token like every other form."""

    include_in_schema = False

    @get("/login", name="auth.login")
    async def login_page(
        self, request: Request[Any, Any, Any], next_path: Annotated[str, QueryParameter(name="next")] = "/"
    ) -> Template | Redirect:
        """The sign-in form; a signed-in visitor goes straight on to ``next``."""
        target = safe_next(next_path)
        if current_user(request) is not None:
            return Redirect(target, status_code=303)
        return render(request, "login.html", {"next": target, "email": "", "error": None})

    @post("/login", name="auth.login_submit", status_code=303, opt={FORM_CHECKED: True})
    async def login_submit(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
    ) -> Template | Redirect:
        """Check the password; on success start a session and go to ``next`` (a local path only). The new
        session comes with its own CSRF token (the one the sign-in form carried stops working).

        A wrong password re-shows the form with the message next to it (401); too many failures give
        429 with the minutes to wait.
        """
        settings = request.app.state.settings
        form = await request.form()
        data = read_login(form)
        target = safe_next(data.next)
        email = data.email.strip()
        # text that cannot be taken: beside the email or password, any other field's above the form; so is
        # a field the form has not or one sent twice (of which the first would have been taken)
        refused = form_errors(
            request,
            form,
            LOGIN_CONTROLS,
            "_form",
            hidden=[f.name for f in fields(LoginForm)],
            nothing="you were not signed in",
        )
        if refused:
            return render(
                request,
                "login.html",
                {"next": target, "email": email, "error": refused.pop("_form", None), "errors": refused},
                status_code=422,
            )
        if not email or not data.password:
            return render(
                request,
                "login.html",
                {"next": target, "email": email, "error": "Enter your email and your password."},
                status_code=400,
            )
        ip = _client_ip(request)
        try:
            user = await sign_in(request.app.state.engine, email, data.password, ip, data.timezone[:64])
        except (Unauthorized, RateLimited) as exc:
            return render(
                request,
                "login.html",
                {"next": target, "email": email, "error": exc.detail},
                status_code=exc.status_code,
            )
        max_age = timedelta(days=settings.session_max_age_days)
        token = await create_session(
            db_session, user.id, max_age=max_age, ip=ip, user_agent=request.headers.get("user-agent")
        )
        # an administrator reset the password: the person chooses their own before anything else
        response = Redirect(PASSWORD_FORM if user.must_change_password else target, status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            token,
            max_age=int(max_age.total_seconds()),
            path="/",
            httponly=True,
            samesite="lax",
            secure=settings.cookies_secure,
        )
        csrf = session_token_for_cookie(settings.resolved_secret_key(), token)
        response.set_cookie(csrf_cookie(csrf, secure=settings.cookies_secure, max_age=max_age))
        return response

    @post("/logout", name="auth.logout", status_code=303)
    async def logout(self, request: Request[Any, Any, Any], db_session: DbSession) -> Redirect:
        """Delete the session row (so the old cookie, and the CSRF token bound to it, stop working
        anywhere) and clear both cookies."""
        token = request.cookies.get(SESSION_COOKIE)
        if token:
            await delete_session(db_session, token)
        response = Redirect("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        response.delete_cookie(CSRF_COOKIE, path="/")
        return response
