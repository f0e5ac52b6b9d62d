"""One submit flow for the job form and the pipeline form: read and parse the posted form, check it
against the schema, start the job or pipeline through :mod:`app.actions`, and answer with a 303 to the
new page or the form again with each error next to its field (422; 413 for a too-large upload; 429
over a person's limit, the limit and when to try again in words above the form).

Also the plain-words messages both forms show: pydantic errors per field (:func:`validate`), the
queue's :class:`~app.errors.BadInput` paths mapped back to controls (:func:`errors_from_bad_input`) and
the job form's optional "Run at" (:func:`~app.web.form_values.parse_run_at`, re-exported here).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from litestar import Request
from litestar.response import Redirect, Template
from markupsafe import Markup
from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadInput, KeyReused, RateLimited, TooLarge
from app.jobs.file_inputs import item_nouns
from app.jobs.input_words import problem_words
from app.web import flash, forms, render, zone
from app.web.deps import file_store, settings_of
from app.web.form_shape import shape_problem
from app.web.form_values import datetime_notes
from app.web.form_values import parse_run_at as parse_run_at
from app.web.input_guard import form_problems, shown_name

STEP_PROBLEMS_MAX = 500
"""Characters of the steps' problems shown above a pipeline form."""


@dataclass
class Submission:
    """A posted job or pipeline form: its ``fields``, the raw ``form``, the ``parsed`` values, the
    ``errors`` per control, the optional ``title`` and whether an upload was too large."""

    fields: list[forms.FormField]
    form: Any
    parsed: forms.ParsedForm
    errors: dict[str, str] = field(default_factory=dict)
    title: str = ""
    too_large: bool = False
    limited: bool = False
    retry_after: dict[str, str] = field(default_factory=dict)
    """The ``Retry-After`` header of a per-person limit's refusal (the form's 429 carries it as the API's does)."""
    key: str = ""
    """The form's one-time key (:data:`app.web.forms.FORM_KEY`; a new one when it sent none)."""
    notes: list[str] = field(default_factory=list)
    """What the page the form lands on says about how a value was read (a time that happens twice)."""
    sent_before: dict[str, Any] | None = None
    """The form's key had started a job or pipeline for other values (:func:`sent_before`)."""


SENT_BEFORE = (
    "This form was sent already, and it started {what} then. What you sent now is different, so "
    "nothing new was started. Send the form again to start another {kind} with these values."
)


PAGES = {"job": "/jobs/", "pipeline": "/pipelines/", "batch": "/batches/"}
"""Where what a one-time key started is shown, by kind."""


def sent_before(exc: KeyReused) -> tuple[str, dict[str, Any]]:
    """A form's one-time key repeated with other values (the back button, then a change): the words above
    the form, and what the notice links (``kind``, ``url`` of what the form started). The form comes back
    with a new key, so sending it again starts a new one — a choice made, not a silent second job."""
    kind = exc.kind
    url = f"{PAGES[kind]}{exc.existing_id}"
    # Said once, in the form's error summary, where the words link what the key started (the words alone
    # are the error's, as the API gives them).
    linked = Markup(SENT_BEFORE).format(what=Markup('<a href="{}">a {}</a>').format(url, kind), kind=kind)
    return SENT_BEFORE.format(what=f"a {kind}", kind=kind), {"kind": kind, "url": url, "words": linked}


SETTINGS_HINT = "Use the form's own fields (the JSON API takes settings such as priority or max_attempts)."
"""Where a job setting the form has no field for belongs (said when the form is sent one)."""
OWN_CONTROLS = {forms.TITLE: forms.TITLE}
"""The controls every job and pipeline form has besides its fields, each to its error's key."""
RUN_AT_CONTROLS = {
    **OWN_CONTROLS,
    "_run_at_date": forms.RUN_AT,
    "_run_at_time": forms.RUN_AT,
    "_run_at_tz": forms.RUN_AT,
}
"""The job form's own controls: its name and "Run later"."""


def text_errors(
    fields: list[forms.FormField], problems: Mapping[str, str], controls: Mapping[str, str]
) -> dict[str, str]:
    """The form's unstorable text (:func:`app.web.input_guard.form_problems`: a NUL, a lone surrogate,
    bytes that are not UTF-8) placed next to its control: a field (and the files kept for it), one of
    ``controls`` (name → error key), or the form as a whole for any other name. The form's route opts
    out of the input guard's refusal (``FORM_CHECKED``) so that the form comes back with what was
    typed instead of a bare 422; an upload's file name is cleaned when it is stored."""
    names = {f.name for f in fields}
    errors: dict[str, str] = {}
    for name, problem in problems.items():
        kept = name.removeprefix(f"{forms.KEEP}.")
        if name in names or (name != kept and kept in names):
            errors.setdefault(kept, problem)
        elif name in controls:
            errors.setdefault(controls[name], problem)
        else:
            sentence = f"{problem[:1].lower()}{problem[1:]}".removesuffix(".")
            errors.setdefault(forms.FORM_ERROR, f"The form's field {shown_name(name)!r} {sentence}.")
    return errors


async def read_form(
    request: Request[Any, Any, Any],
    db: AsyncSession,
    model: type[BaseModel],
    controls: Mapping[str, str] = OWN_CONTROLS,
    key: str | None = None,
) -> Submission:
    """Parse the posted form for ``model`` (uploads are stored as the signed-in user's files, once per
    form ``key``: the form's own key when not given). Text that cannot be taken is an error next to
    its control (:func:`text_errors`; ``controls``: the form's own controls besides the fields), shown
    before any other of that control."""
    user, settings = request.user, settings_of(request)
    fields = forms.form_fields(model)
    form = await request.form()
    key = key or forms.form_key(form.get(forms.FORM_KEY))
    refused = text_errors(fields, form_problems(request), controls)
    parsed = await forms.parse_form(
        fields,
        form,
        tz=zone(user.timezone),
        conn=await db.connection(),
        store=file_store(request),
        principal=user,
        max_upload_bytes=settings.upload_max_bytes,
        settings=settings,
        key=key,
    )
    title = str(form.get(forms.TITLE) or "").strip()
    notes = datetime_notes(fields, form, zone(user.timezone))
    errors = {**parsed.errors, **refused}
    shape = shape_problem(form, *form_names(fields, controls), hint=SETTINGS_HINT)
    if shape:
        errors.setdefault(forms.FORM_ERROR, shape)
    return Submission(fields, form, parsed, errors, title, parsed.too_large, key=key, notes=notes)


def input_names(fields: list[forms.FormField]) -> tuple[set[str], set[str]]:
    """The names the controls made from an input schema send (its fields, a file field's kept files) and
    those they may send more than once (a many-files field, kept files): the job, pipeline and schedule
    forms' own share."""
    files = [f for f in fields if f.kind in ("file", "files")]
    kept = {f"{forms.KEEP}.{f.name}" for f in files}
    return {f.name for f in fields} | kept, kept | {f.name for f in files if f.kind == "files"}


def form_names(fields: list[forms.FormField], controls: Mapping[str, str]) -> tuple[set[str], set[str]]:
    """The names a job or pipeline form sends (:func:`input_names`, its own controls, its key) and those
    it may send more than once."""
    known, many = input_names(fields)
    return known | set(controls) | set(OWN_CONTROLS) | {forms.FORM_KEY}, many


def check_schema(sub: Submission, model: type[BaseModel]) -> None:
    """Add the schema's own complaints about the parsed values (a control's parse error wins)."""
    for name, message in validate(model, sub.parsed.data).items():
        sub.errors.setdefault(name, message)


async def start(
    db: AsyncSession, sub: Submission, create: Callable[[], Awaitable[Mapping[Any, Any]]]
) -> Mapping[Any, Any] | None:
    """Run ``create`` in a savepoint when the form has no errors; its :class:`BadInput`,
    :class:`TooLarge` or :class:`RateLimited` become the form's errors. Returns the created row, or
    ``None``."""
    if sub.errors:
        return None
    try:
        async with db.begin_nested():
            return await create()
    except KeyReused as exc:
        sub.errors[forms.FORM_ERROR], sub.sent_before = sent_before(exc)
    except BadInput as exc:
        sub.errors = errors_from_bad_input(exc, sub.fields)
        steps = [f"{path}: {message}" for path, message in exc.errors.items() if path.startswith("steps")]
        if steps:
            sub.errors[forms.FORM_ERROR] = (
                "One of the steps could not be prepared from what you entered: "
                + "; ".join(steps)[:STEP_PROBLEMS_MAX]
            )
    except TooLarge as exc:
        sub.errors = {forms.FORM_ERROR: exc.detail}
        sub.too_large = True
    except RateLimited as exc:
        sub.errors = {forms.FORM_ERROR: exc.detail}
        sub.limited = True
        sub.retry_after = dict(exc.extra.get("headers") or {})
    return None


async def answer(
    request: Request[Any, Any, Any],
    db: AsyncSession,
    sub: Submission,
    created: Mapping[Any, Any] | None,
    *,
    url: str,
    form_context: Callable[[Submission], dict[str, Any]],
) -> Template | Redirect:
    """A 303 to ``url`` + the new id, or the form again with its errors (uploads are kept: the re-shown
    form refers to them)."""
    if created is not None:
        if sub.notes:
            return flash.redirect(request, f"{url}{created['id']}", " ".join(sub.notes))
        return Redirect(f"{url}{created['id']}", status_code=303)
    if sub.parsed.new_files:
        await db.commit()
    status = 413 if sub.too_large else 429 if sub.limited else 422
    context = form_context(sub)
    if sub.sent_before is not None:
        context["form_key"], context["sent_before"] = str(uuid.uuid4()), sub.sent_before
    return render(request, "jobs/new.html", context, status_code=status, headers=sub.retry_after)


# --- validation messages ------------------------------------------------------------------------------


def validate(model: type[BaseModel], data: dict[str, Any]) -> dict[str, str]:
    """Per-field plain-words errors of ``data`` against ``model`` (empty when valid), in the words of a
    batch row's and the API's (:func:`app.jobs.input_words.problem_words`). An item of a list is named
    by its position (``Line 3: …``), an entry of an object by its key (``speed: …``)."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        nouns = item_nouns(model)
        for err in exc.errors():
            loc = err.get("loc") or ()
            name = str(loc[0]) if loc else forms.FORM_ERROR
            message = problem_words(err, noun=nouns.get(name, "item") if len(loc) == 1 else "item")
            if len(loc) > 1 and isinstance(loc[1], int):
                message = f"Line {loc[1] + 1}: {message}"
            elif len(loc) > 1:
                message = f"{loc[1]}: {message}"
            errors.setdefault(name, message)
        return errors
    return {}


_PATH_FIELD = re.compile(r"^input_data\.([^.\[]+)")


def errors_from_bad_input(exc: BadInput, fields: list[forms.FormField]) -> dict[str, str]:
    """Map a :class:`BadInput`'s paths onto form controls: ``input_data.<field>…`` → that field,
    ``run_at`` → the "Run at" controls, anything else → the form as a whole."""
    names = {f.name for f in fields}
    errors: dict[str, str] = {}
    items = exc.errors or {forms.FORM_ERROR: exc.detail}
    for path, message in items.items():
        text = str(message)
        text = text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
        m = _PATH_FIELD.match(path)
        if m and m.group(1) in names:
            errors.setdefault(m.group(1), text)
        elif path == "run_at":
            errors.setdefault(forms.RUN_AT, text)
        elif path == "title":
            errors.setdefault(forms.TITLE, text)
        else:
            errors.setdefault(
                forms.FORM_ERROR, text if path in (forms.FORM_ERROR, "input_data") else f"{path}: {text}"
            )
    return errors
