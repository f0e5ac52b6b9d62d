"""Web layer helpers shared by every controller: :func:`render` and the Jinja filters.

Controllers live one per page area in this package (``auth.py``, ``home.py``, …) and return
``render(...)``. Templates mirror them under ``templates/``: ``area/page.html`` plus ``area/_fragment.html``.

Filters available in every template (registered by :func:`register_filters`):

* ``localtime`` — a datetime in the signed-in user's time zone, e.g. ``29 Nov 2026, 20:25 CET``;
* ``clock`` — its time of day there, ``20:25:07`` (a job log line's);
* ``isotime`` — ISO 8601 in UTC, for ``<time datetime=…>``;
* ``ago`` — relative to now: ``just now``, ``2 min ago``, ``in 3 h``, ``5 days ago``, ``in about 12 years``;
* ``duration`` — seconds as ``850 ms``, ``42 s``, ``3 min 5 s``, ``2 h 10 min``;
* ``filesize`` — bytes as ``512 bytes``, ``1.5 KiB``, ``25 MiB``;
* ``filesize_of(limit)`` — bytes against their limit, ``1 KiB of 4.9 KiB``, exact when rounding would make
  two different sizes read the same (:func:`app.formatting.format_sizes`);
* ``as_typed`` — a form control's value as it was typed or stored (escaped, not balanced: see below).

Every value a template outputs (``{{ … }}``, in text and in attributes alike) is :func:`balanced` on its
way out: a name, a file name or an error that opens a text direction (U+202E, right-to-left override)
closes it at its own end, so it cannot reverse the words after it. ``static/app.css`` also sets every
inline element apart (``unicode-bidi: isolate``), so a value in its own element neither turns nor is
turned by its neighbours. Together they are the rule for user text on pages: no template marks it —
except a form control's value (``value="…"``, a textarea's text, a hidden field), shown in the control's
own box (or not at all) and sent back with the form, which ``as_typed`` keeps as it was: every template
that fills a field with what was sent uses it.
"""

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from jinja2 import Environment, pass_context
from litestar import Request
from litestar.di import NamedDependency
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Template
from markupsafe import Markup, escape
from sqlalchemy.ext.asyncio import AsyncSession

from app.dbclock import db_time
from app.formatting import (
    COMMON_ZONES,
    balanced,
    format_bytes,
    format_duration,
    format_localtime,
    format_sizes,
    in_zone,
    span_words,
    zone,
    zone_names,
)
from app.web import flash

#: Annotation for the request's database session (advanced-alchemy, committed on 2xx/3xx responses,
#: rolled back otherwise): ``async def handler(self, db_session: DbSession) -> …``.
DbSession = NamedDependency[AsyncSession]


def is_htmx(request: Request[Any, Any, Any]) -> bool:
    """Whether the request was sent by htmx (``HX-Request: true``) and is not a boosted navigation."""
    headers = request.headers
    return headers.get("hx-request") == "true" and headers.get("hx-boosted") != "true"


def current_user(request: Request[Any, Any, Any]) -> Any:
    """``request.user`` or ``None`` — also safe on responses to paths no route matched (no middleware)."""
    return request.scope.get("user")


def render(
    request: Request[Any, Any, Any],
    template: str,
    context: Mapping[str, Any] | None = None,
    *,
    fragment: str | None = None,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> Template:
    """Render ``template`` (a full page), or ``fragment`` instead when htmx asked for it.

    The context always has ``user`` (a :class:`app.auth.CurrentUser` or ``None``); Litestar adds
    ``request``, ``csrf_input`` and ``csrf_token()``. When a fragment is given the response carries
    ``Vary: HX-Request`` so caches keep the two apart.
    """
    ctx = {"user": current_user(request), **(context or {})}
    name = fragment if fragment and is_htmx(request) else template
    hdrs = dict(headers or {})
    if fragment:
        hdrs["Vary"] = "HX-Request"
    cookies: list[Any] = []
    if not is_htmx(request):
        # a full page shows the notice an action left for it (app.web.flash), once
        ctx["flash"], cookies = flash.render_flash(request)
    return Template(template_name=name, context=ctx, status_code=status_code, headers=hdrs, cookies=cookies)


# --- filters ------------------------------------------------------------------------------------------------


def _user_zone(ctx: Mapping[str, Any]) -> ZoneInfo:
    user = ctx.get("user")
    return zone(getattr(user, "timezone", None))


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def format_ago(value: datetime | None, now: datetime | None = None) -> str:
    """``just now`` / ``2 min ago`` / ``in 3 h`` / ``5 days ago`` / ``about 4 months ago`` / ``in about
    6,974 years`` relative to ``now`` (default: now)."""
    if value is None:
        return ""
    now = now or db_time()  # the clock that wrote ``value``, not the web host's
    delta = (now - _aware(value)).total_seconds()
    future = delta < 0
    secs = abs(delta)
    if secs < 45:
        return "just now" if not future else "in a few seconds"
    if secs < 90 * 60:
        text = f"{max(1, round(secs / 60))} min"
    elif secs < 22 * 3600:
        text = f"{round(secs / 3600)} h"
    else:
        text = span_words(secs / 86400)
    return f"in {text}" if future else f"{text} ago"


def format_filesize(value: int | None) -> str:
    """Bytes in words: ``512 bytes``, ``1.5 KiB``, ``25 MiB``; ``""`` for ``None``."""
    return "" if value is None else format_bytes(int(value))


def format_filesize_of(value: int, limit: int) -> str:
    """``value`` bytes against ``limit``: ``1 KiB of 4.9 KiB``, never ``2 KiB of 2 KiB`` with room left."""
    said, most = format_sizes(int(value), int(limit))
    return f"{said} of {most}"


@pass_context
def _localtime_filter(ctx: Mapping[str, Any], value: datetime | None, seconds: bool = False) -> str:
    return format_localtime(value, _user_zone(ctx), seconds=seconds)


@pass_context
def _clock_filter(ctx: Mapping[str, Any], value: datetime | None) -> str:
    """``13:23:54``: the time of day in the signed-in user's zone (a log line's time, beside lines of the
    same day; its ``<time>`` element carries the full time for a tooltip)."""
    if value is None:
        return ""
    local = in_zone(value, _user_zone(ctx))
    return f"{local.hour:02d}:{local.minute:02d}:{local.second:02d}"


def _isotime_filter(value: datetime | None) -> str:
    if value is None:
        return ""
    if value.tzinfo is UTC:  # as the database driver gives them: no conversion needed
        return value.isoformat(timespec="seconds")
    return in_zone(value, UTC).isoformat(timespec="seconds")


def _finalize(value: Any) -> Any:
    """What every ``{{ … }}`` outputs: a plain string :func:`balanced` (text directions it opens are
    closed, see the module's docstring); markup already made safe (``Markup``: ``tojson``, the CSRF
    input) and other values as they are."""
    return balanced(value) if type(value) is str else value


def _as_typed_filter(value: Any) -> Markup:
    """``{{ value | as_typed }}``: a form control's value escaped but not :func:`balanced` — the person's
    data, which the control shows in its own box (a direction it opens reaches nothing outside it), and
    which is sent back as the form is submitted: balanced, "Edit and resubmit" and a form shown again with
    its errors changed what was typed (a closer added, closers of nothing dropped)."""
    return escape(value)


_DICT_ATTRIBUTES = frozenset(dir(dict))


def fast_getattr(environment: Environment) -> Callable[[Any, str], Any]:
    """Jinja's ``environment.getattr`` (what ``{{ row.name }}`` calls) with a shortcut for plain dicts,
    the pages' usual rows: Jinja tries the attribute first and looks the key up after the
    ``AttributeError``, and raising that exception for every cell of a 50-row list was an eighth of
    ``/admin/jobs``' CPU. A ``dict`` has no attributes but its class's (:data:`_DICT_ATTRIBUTES`, e.g.
    ``items``), so looking any other name up as a key first gives the same answer."""
    general = environment.getattr
    undefined = environment.undefined

    def getattr_(obj: Any, attribute: str) -> Any:
        if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
            try:
                return obj[attribute]
            except KeyError:
                return undefined(obj=obj, name=attribute)
        return general(obj, attribute)

    return getattr_


def email_breaks(address: Any) -> Markup:
    """An e-mail address, escaped, as its parts up to and with each "@" and dot, each kept whole on a
    line (``.addr-part``, an inline block) with a line-break opportunity (``<wbr>``) after it, so a
    narrow column breaks it where it reads well ("ann.lee@" / "example-company." / "com") rather than at
    any character or after a hyphen; a part too long for the column still breaks inside (the CSS)."""
    parts = [p for p in re.split(r"(?<=[@.])", "" if address is None else str(address)) if p]
    return Markup("<wbr>").join(Markup('<span class="addr-part">{}</span>').format(p) for p in parts)


def register_filters(engine: JinjaTemplateEngine) -> None:
    """Install the filters above on the Jinja environment (``TemplateConfig(engine_callback=…)``), and
    stop Jinja from checking every template file's mtime on each render (templates change only with a
    release; a restart picks them up) — a measurable part of a poll's cost in ``bench/pages.py``."""
    engine.engine.auto_reload = False
    engine.engine.finalize = _finalize
    engine.engine.getattr = fast_getattr(engine.engine)  # type: ignore[method-assign,assignment]
    engine.engine.filters.update(
        localtime=_localtime_filter,
        clock=_clock_filter,
        isotime=_isotime_filter,
        ago=format_ago,
        duration=format_duration,
        filesize=format_filesize,
        filesize_of=format_filesize_of,
        as_typed=_as_typed_filter,
        email_breaks=email_breaks,
    )
    # the shared zone picker (templates/_zone_picker.html) lists these itself, so no page has to pass them
    engine.engine.globals.update(zone_names=zone_names, common_zone_count=len(COMMON_ZONES))
