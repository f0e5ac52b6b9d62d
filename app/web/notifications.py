"""A person's notices on the web: the bell (an unread count on every page, refreshed out of band by the
polls the pages already make), the ``/notifications`` page with "Mark as read", and the e-mail choice
form (``templates/account/_notifications.html``) that the account page includes.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, Request, get, post
from litestar.params import QueryParameter
from litestar.response import Redirect, Template

from app import notifications
from app.actions import account as account_actions
from app.auth import requires_user
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.web import DbSession, is_htmx, render
from app.web.account import account_page
from app.web.deps import FORM, client_ip, not_taken, rows_of
from app.web.form_shape import form_errors
from app.web.form_values import NOT_A_CHECKBOX, checkbox
from app.web.input_guard import FORM_CHECKED

# --- the bell in the polls pages already make ----------------------------------------------------------
# A page puts the count it shows in its poll's URL (``bell_url``); the poll compares it with the count
# now (``bell_news``) and, when they differ, answers even if nothing else changed, with ``bell`` in its
# context: the poll's fragment includes ``notifications/_bell_oob.html``, which swaps the bell out of
# band, and the fragment's new poll URL carries the new count.


def bell_url(url: str, count: int | None) -> str:
    """``url`` carrying the unread ``count`` the page shows (unchanged when the page shows none)."""
    return url if count is None else f"{url}{'&' if '?' in url else '?'}bell={count}"


def bell_news(count: int | None, bell: int | None) -> bool:
    """Whether the viewer's unread ``count`` differs from the ``bell`` their page shows."""
    return bell is not None and count is not None and count != bell


async def viewer_bell(db: Any, user: Any) -> int:
    """The viewer's unread count, for a page whose poll carries it (one indexed count)."""
    rows = await rows_of(db, notifications.UNREAD, {"user": user.id})  # straight on asyncpg
    return int(rows[0]["count"])


def poll_bell(row: Any, user: Any, bell: int | None) -> tuple[bool, int | None]:
    """For a poll whose row counts its owner's unread notices (``unread``; one round trip): ``(news,
    count)`` — whether the count differs from the ``bell`` the page shows, and the count to show
    (``None`` when the poll cannot tell: the viewer is not the owner, or the page did not say)."""
    if bell is None or row.get("unread") is None or row["user_id"] != user.id:
        return False, None
    count = int(row["unread"])
    return bell_news(count, bell), count


def _ids(values: list[str]) -> list[int]:
    out = []
    for v in values:
        try:
            out.append(int(v))
        except ValueError:
            continue
    return out


def _back(target: Any) -> str:
    """A local path to return to (never another site)."""
    path = str(target or "")
    return path if path.startswith("/") and not path.startswith("//") else "/notifications"


async def _page(
    request: Request[Any, Any, Any], db: Any, status_code: int = 200, after: str | None = None, **extra: Any
) -> Template:
    uid = request.user.id
    since = read_cursor(after, Cursor.NOTICE)  # one it did not give is a 422, not the first page
    rows = await notifications.listing(db, uid, notifications.PAGE + 1, since)
    items, older = page_of(rows, notifications.PAGE, notifications.cursor_of)
    for item in items:
        item["href"] = notifications.link(item)
    ctx = {
        "items": items,
        "older_url": f"/notifications?{urlencode({'after': older})}" if older else None,
        "newest_url": "/notifications" if since else None,
        "paged": bool(since),
        "bell": await notifications.unread_count(db, uid),
        "email_on": await notifications.email_choice(db, uid),
        "smtp": bool(request.app.state.settings.smtp_host),
        **extra,
    }
    return render(request, "notifications/list.html", ctx, status_code=status_code)


class NotificationsController(Controller):
    """``/notifications``, its bell and its forms."""

    path = "/notifications"
    guards = [requires_user]
    include_in_schema = False

    @get("/", name="notifications.list")
    async def page(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        after: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """The person's notices, newest first, unread ones in bold, each linking to its job or pipeline;
        :data:`app.notifications.PAGE` a page, older ones behind the Older link (``after``)."""
        return await _page(request, db_session, after=after)

    @get("/bell", name="notifications.bell")
    async def bell(self, request: Request[Any, Any, Any], db_session: DbSession) -> Template:
        """The bell with the unread count (fetched once as a page loads; polls refresh it out of band)."""
        count = await notifications.unread_count(db_session, request.user.id)
        return Template(template_name="notifications/_bell_link.html", context={"bell": count})

    @post("/read", name="notifications.read", status_code=303, opt={FORM_CHECKED: True})
    async def read(self, request: Request[Any, Any, Any], db_session: DbSession) -> Redirect | Template:
        """Mark the ticked notices (or, with ``all``, every one) read; a form that cannot be taken is the
        page again (422) saying why above the list, nothing marked."""
        form = await request.form()
        problem = form_errors(request, form, (), FORM, hidden=("id", "all"), repeatable=("id",))
        if problem:
            return await _page(request, db_session, 422, read_error=not_taken(problem))
        ids = None if form.get("all") else _ids(form.getall("id") if hasattr(form, "getall") else [])
        await notifications.mark_read(db_session, request.user.id, ids)
        if is_htmx(request):
            return await _page(request, db_session)
        return Redirect("/notifications", status_code=303)

    @post("/email", name="notifications.email", status_code=303, opt={FORM_CHECKED: True})
    async def email(self, request: Request[Any, Any, Any], db_session: DbSession) -> Redirect | Template:
        """The e-mail choice (on the account page and on this one): ``email=on`` sends notices by e-mail
        too. A value no checkbox sends, or text that cannot be taken, is the page it came from again
        (422) with the error at the top of the form; nothing is saved."""
        form = await request.form()
        back = _back(form.get("next"))
        errors = form_errors(request, form, (), FORM, hidden=("next", "email"))
        choice = checkbox(form.get("email"))
        if errors or choice is None:
            error = not_taken(errors or {FORM: NOT_A_CHECKBOX})
            if back.startswith("/account"):
                return await account_page(request, db_session, 422, email_error=error)
            return await _page(request, db_session, 422, email_error=error)
        await account_actions.set_email_notifications(db_session, request.user, choice, ip=client_ip(request))
        return Redirect(back, status_code=303)
