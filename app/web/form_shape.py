"""A posted form's shape: every field it sends is one the form has, and each is sent once unless the form
sends it so (a many-files control). The JSON API refuses a field its route does not declare
(:mod:`app.web.body_fields`); a form read field by field with ``form.get`` dropped the others without a
word (``priority=50`` on the job form started a job at priority 0) and took the first of a repeated
field (``url`` twice), so the same input was refused by one path and half-read by the other.

Fields a browser adds of its own accord are not the form's to refuse: the CSRF token (the CSRF
middleware has already read it, :data:`BROWSER_ARTEFACTS`), and a named submit button, which a form that
has one names among its fields.

A form that reads its fields shows its own errors (``FORM_CHECKED``) and checks its shape with
:func:`form_errors` (or :func:`shape_problem`), from the list of fields it reads. Every other page form is
a button (sign out, revoke, enable, cancel…) that reads no field at all: :class:`ButtonFormMiddleware`
refuses one sent any field but the CSRF token, with a 422 page saying which, before its handler runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from litestar.enums import RequestEncodingType, ScopeType
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from app.errors import BadInput
from app.web.csrf import FORM_FIELD as CSRF_FIELD
from app.web.input_guard import API_PREFIX, FORM_CHECKED, problems_beside, shown_name

BROWSER_ARTEFACTS = frozenset({CSRF_FIELD})
"""Names every form may send that carry no input of its own: the CSRF token."""


def _pairs(form: Any) -> list[tuple[str, Any]]:
    if hasattr(form, "multi_items"):
        return list(form.multi_items())
    return list(form.items())


def shape_problem(
    form: Any,
    known: Iterable[str],
    repeatable: Iterable[str] = (),
    *,
    nothing: str = "nothing was started",
    hint: str = "",
) -> str | None:
    """Why ``form`` cannot be read as the form whose fields are ``known`` (``repeatable``: those it may
    send more than once), in words for the top of the form; ``None`` when it can. ``nothing``: what the
    form did not do ("nothing was saved"), or ``""`` when the answer says it around these words
    ("Nothing changed: …", :func:`app.web.deps.not_taken`); ``hint``: a sentence on where the refused
    field belongs."""
    known_names = set(known) | BROWSER_ARTEFACTS
    many = set(repeatable)
    counts = Counter(name for name, _ in _pairs(form))
    unknown = [name for name in counts if name not in known_names]
    if unknown:
        names = ", ".join(repr(shown_name(n)) for n in unknown[:5])
        plural = "" if len(unknown) == 1 else "s"
        done = f"; {nothing}." if nothing else "."
        return f"This form has no field{plural} {names}{done}{f' {hint}' if hint else ''}"
    repeated = [name for name, n in counts.items() if n > 1 and name not in many]
    if repeated:
        names = ", ".join(repr(shown_name(n)) for n in repeated[:5])
        done = f" {nothing[:1].upper()}{nothing[1:]}." if nothing else ""
        return f"The form sent {names} more than once; send each field once.{done}"
    return None


def form_errors(
    request: Any,
    form: Any,
    controls: Mapping[str, str] | Iterable[str],
    other: str,
    *,
    hidden: Iterable[str] = (),
    repeatable: Iterable[str] = (),
    nothing: str = "nothing was saved",
) -> dict[str, str]:
    """The errors a form that shows its own (``FORM_CHECKED``) has before any of its values is read, keyed
    as it shows them: text that cannot be taken (:func:`app.web.input_guard.problems_beside`, beside its
    control), then a shape that cannot be read (:func:`shape_problem`, under ``other``). ``controls``: the
    fields a person fills in (a mapping name → error key, or names that are their own keys); ``hidden``:
    the form's other fields (hidden inputs, a named button); ``repeatable``: those it sends more than
    once. One list of the form's fields serves both rules."""
    errors = problems_beside(request, controls, other)
    shape = shape_problem(form, [*controls, *hidden], repeatable, nothing=nothing)
    if shape:
        errors.setdefault(other, shape)
    return errors


def _is_button_form(scope: Scope) -> bool:
    """Whether the request is a form posted to a page route that reads no field of it (not
    ``FORM_CHECKED``, no declared body)."""
    handler = scope.get("route_handler")
    if handler is None or scope.get("method", "GET") in ("GET", "HEAD", "OPTIONS"):
        return False
    if scope.get("path", "").startswith(API_PREFIX) or handler.opt.get(FORM_CHECKED):
        return False
    return handler.parsed_data_field is None


class ButtonFormMiddleware(ASGIMiddleware):
    """Refuses, with a 422 saying which, a field sent to a page form that reads none (see the module
    docstring): it would be dropped without a word. Runs after the input guard, which has parsed the form."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if _is_button_form(scope):
            request: Any = scope["litestar_app"].request_class(scope=scope, receive=receive)
            forms = (RequestEncodingType.URL_ENCODED, RequestEncodingType.MULTI_PART)
            if request.content_type[0] in forms:
                problem = shape_problem(await request.form(), (), nothing="nothing was done")
                if problem:
                    raise BadInput(problem)
        await next_app(scope, receive, send)
