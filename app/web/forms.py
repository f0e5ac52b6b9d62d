"""Web forms generated from a job type's or pipeline template's pydantic input schema.

People who are not engineers never type JSON: each schema field becomes one form control whose ``name``
is the field's name, with the label (``title``), help text (``description``), default and required mark
taken from the schema. The kinds (``FormField.kind``):

==========  ======================================================  ====================================
kind        schema type                                             control
==========  ======================================================  ====================================
text        ``str``                                                 ``<input type=text>``
textarea    :data:`app.processors.LongText`                         ``<textarea>``
integer     ``int``                                                 ``<input type=number step=1>``
decimal     ``float`` / ``Decimal``                                 ``<input type=text inputmode=decimal>``
boolean     ``bool``                                                checkbox (yes/no)
choice      ``Literal[...]`` / ``Enum``                             ``<select>``
date        ``datetime.date``                                       ``<input type=date>``
datetime    ``datetime.datetime`` (in the user's time zone)         ``<input type=datetime-local>``
time        ``datetime.time``                                       ``<input type=time>``
file        :data:`app.processors.FileId`                           file picker (stored, id in the input)
files       :data:`app.processors.FileIds`                          multiple file picker
list        ``list[str]``                                           ``<textarea>``, one item per line
json        anything else (nested models, dicts)                    ``<textarea>`` holding JSON (fallback)
==========  ======================================================  ====================================

Reserved control names start with ``_`` (pydantic field names cannot): ``_csrf_token``, ``_run_at_*``,
``_keep.<field>`` (an already uploaded file kept across a re-rendered form), ``_form_key``.

Parsing turns the submitted strings into schema values and friendly per-field messages; the authority
is still the queue's own check (through :mod:`app.actions`), whose :class:`~app.errors.BadInput` paths
(``input_data.seconds``) are mapped back to fields by :func:`app.web.submit.errors_from_bad_input`.
"""

from __future__ import annotations

import enum
import functools
import json
import types
import typing
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from app.actions.files import store_upload
from app.errors import NotFound, RateLimited
from app.files import FileStore
from app.formatting import in_zone, label_words
from app.processors import widget_of
from app.settings import Settings
from app.web.form_values import NOT_A_CHECKBOX, checkbox, convert, is_subclass

FORM_ERROR = "_form"
"""Key of an error that belongs to no single field (shown above the form)."""
RUN_AT = "_run_at"
"""Key of the job form's "Run at" errors."""
TITLE = "_title"
"""Key of the job form's optional name (the job's ``title``)."""
KEEP = "_keep"
"""Prefix of the controls that keep a field's files across a re-rendered form (``_keep.<field>``)."""
FORM_KEY = "_form_key"
"""Name of the one-time key a job, pipeline or batch form carries: a repeat of it starts nothing new."""


def form_key(value: Any) -> str:
    """The form key a form sent (``FORM_KEY``), or a new one when it sent none or not a key."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return str(uuid.uuid4())


@dataclass(frozen=True)
class Choice:
    """One option of a ``choice`` field: ``value`` as submitted, ``label`` as shown."""

    value: str
    label: str


@dataclass(frozen=True)
class FormField:
    """One control of a generated form.

    ``default`` is the schema default as a Python value (``None`` when required or defaulting to
    ``None``); ``attrs`` are HTML hints (``min``, ``max``, ``step``, ``data-maxlength``: never ``maxlength``, which cuts a paste) — the server checks
    again; ``python_type`` is the unwrapped annotation (e.g. ``Decimal`` vs ``float`` for ``decimal``).
    """

    name: str
    kind: str
    label: str
    help: str | None
    required: bool
    default: Any = None
    choices: tuple[Choice, ...] = ()
    attrs: dict[str, str] = field(default_factory=dict)
    python_type: Any = None
    choice_values: tuple[Any, ...] = ()
    accept: str | None = None
    """A file field's ``accept=`` (the schema's ``accept`` hint: ``image/*``, ``.csv,…``)."""


@dataclass
class ParsedForm:
    """The outcome of :func:`parse_form`.

    ``data``: the input for the schema (only fields that were given; defaults fill the rest);
    ``values``: what to show again in each control (strings; ``bool`` for checkboxes; a list of file
    infos ``{"id","name","size"}`` for file fields); ``errors``: field name → message;
    ``new_files``: ids stored by this request; ``too_large``: an upload was above ``UPLOAD_MAX_BYTES``.
    """

    data: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    new_files: list[uuid.UUID] = field(default_factory=list)
    too_large: bool = False


@dataclass(frozen=True)
class _OwnerOnly:
    """A principal that may read only its own files: a job's input files must belong to the job's
    owner (its processor reads them as that owner), even when an admin fills in the form."""

    id: int
    is_admin: bool = False


# --- schema → fields ---------------------------------------------------------------------------------


def humanize(name: str) -> str:
    """``max_items`` → ``Max items``, ``final_url`` → ``Final URL`` (:func:`app.formatting.label_words`)."""
    return label_words(name)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """``(inner type, optional)``: strips ``Annotated`` and ``X | None``."""
    optional = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) < len(typing.get_args(annotation)):
                optional = True
            if len(args) == 1:
                annotation = args[0]
                continue
        return annotation, optional


def _kind(tp: Any, widget: str | None) -> tuple[str, tuple[Any, ...]]:
    """The control kind for an unwrapped type, and the allowed values of a choice."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "choice", typing.get_args(tp)
    if is_subclass(tp, enum.Enum):
        return "choice", tuple(m.value for m in tp)
    if tp is bool:
        return "boolean", ()
    if is_subclass(tp, int) and not is_subclass(tp, enum.Enum):
        return "integer", ()
    if tp is float or is_subclass(tp, Decimal):
        return "decimal", ()
    if tp is str:
        return ("textarea" if widget == "textarea" else "text"), ()
    if tp is datetime:
        return "datetime", ()
    if tp is date:
        return "date", ()
    if tp is time:
        return "time", ()
    if tp is uuid.UUID:
        return ("file" if widget == "file" else "text"), ()
    if origin in (list, tuple, set, frozenset):
        args = typing.get_args(tp)
        inner = _unwrap(args[0])[0] if args else Any
        if inner is uuid.UUID and widget == "files":
            return "files", ()
        if inner is str:
            return "list", ()
        if inner is int and not is_subclass(inner, enum.Enum):
            return "integers", ()
        if inner is float or is_subclass(inner, Decimal):
            return "decimals", ()
    return "json", ()


def _constraints(metadata: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata:
        for attr in ("ge", "gt", "le", "lt", "min_length", "max_length", "multiple_of"):
            value = getattr(m, attr, None)
            if value is not None:
                out[attr] = value
        if isinstance(m, annotated_types.Interval):
            for attr in ("ge", "gt", "le", "lt"):
                if getattr(m, attr) is not None:
                    out[attr] = getattr(m, attr)
    return out


def num_text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _attrs(kind: str, c: dict[str, Any]) -> dict[str, str]:
    attrs: dict[str, str] = {}
    if kind == "integer":
        attrs["step"] = "1"
        if "ge" in c:
            attrs["min"] = num_text(c["ge"])
        elif "gt" in c:
            attrs["min"] = num_text(int(c["gt"]) + 1)
        if "le" in c:
            attrs["max"] = num_text(c["le"])
        elif "lt" in c:
            attrs["max"] = num_text(int(c["lt"]) - 1)
    if kind in ("text", "textarea") and "max_length" in c:
        # Not ``maxlength``: a browser silently cuts a longer paste to it (a 270-character title became
        # 200), so the server never saw the extra. The server refuses the whole text with an error next
        # to the field instead, naming the limit and the count, and the help line names the limit.
        attrs["data-maxlength"] = str(c["max_length"])
    return attrs


@functools.lru_cache(maxsize=512)
def _json_schema(model: type[BaseModel]) -> dict[str, Any]:
    # pydantic builds the schema anew on every call (7 % of a job page's CPU in bench/pages.py);
    # a model class's schema never changes, and form_fields only reads it
    return model.model_json_schema()


def form_fields(model: type[BaseModel]) -> list[FormField]:
    """The controls for ``model``'s fields, in declaration order."""
    schema = _json_schema(model)
    props = schema.get("properties") or {}
    fields: list[FormField] = []
    for name, info in model.model_fields.items():
        prop = props.get(info.alias or name) or {}
        widget = widget_of(prop)
        if widget is None and isinstance(info.json_schema_extra, dict):
            w = info.json_schema_extra.get("widget")
            widget = w if isinstance(w, str) else None
        tp, _optional = _unwrap(info.annotation)
        kind, values = _kind(tp, widget)
        required = info.is_required()
        default = None
        if not required:
            default = info.get_default(call_default_factory=True)
            if default is PydanticUndefined:
                default = None
        choices: tuple[Choice, ...] = ()
        found_words = prop.get("x-labels")
        words: dict[Any, Any] = found_words if isinstance(found_words, dict) else {}
        if kind == "choice":
            if is_subclass(tp, enum.Enum):
                choices = tuple(
                    Choice(str(m.value), str(words.get(m.value) or humanize(m.name.lower()))) for m in tp
                )
            else:
                choices = tuple(Choice(str(v), str(words.get(v) or v)) for v in values)
        label = info.title or humanize(name)
        fields.append(
            FormField(
                name=name,
                kind=kind,
                label=label,
                help=info.description,
                required=required,
                default=default,
                choices=choices,
                attrs=_attrs(kind, _constraints(list(info.metadata))),
                python_type=tp,
                choice_values=tuple(values),
                accept=str(prop["accept"]) if kind in ("file", "files") and prop.get("accept") else None,
            )
        )
    return fields


# --- values shown in controls -----------------------------------------------------------------------


def _local(dt: datetime, tz: ZoneInfo) -> datetime:
    return in_zone(dt, tz)


def display_value(f: FormField, value: Any, tz: ZoneInfo) -> Any:
    """A Python or JSON value of ``f`` as the control shows it (str, or bool for checkboxes).
    File fields are handled by :func:`initial_values` (they need the file rows)."""
    if value is None:
        return False if f.kind == "boolean" else ""
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        if f.kind == "boolean":
            return bool(value)
        if f.kind == "datetime":
            dt = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
            return _local(dt, tz).strftime("%Y-%m-%dT%H:%M")
        if f.kind == "date":
            return value.isoformat() if isinstance(value, date) else str(value)
        if f.kind == "time":
            t = value if isinstance(value, time) else time.fromisoformat(str(value))
            return t.strftime("%H:%M:%S" if t.second else "%H:%M")
        if f.kind == "list":
            return "\n".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)
        if f.kind in ("integers", "decimals"):
            items = value if isinstance(value, list | tuple) else [value]
            return ", ".join(num_text(v) if isinstance(v, float) else str(v) for v in items)
        if f.kind == "json":
            if isinstance(value, BaseModel):
                value = value.model_dump(mode="json")
            return json.dumps(value, indent=2, ensure_ascii=False, default=str)
        if f.kind == "decimal" and isinstance(value, float):
            return num_text(value)
    except (TypeError, ValueError):
        return str(value)
    return str(value)


async def initial_values(
    fields: list[FormField],
    source: dict[str, Any] | None,
    tz: ZoneInfo,
    conn: Any,
    store: FileStore,
    principal: Any,
) -> dict[str, Any]:
    """What each control shows first: the schema defaults, or — for "Edit and resubmit" — the values of
    ``source`` (an earlier job's stored ``input_data``). Files named in ``source`` are shown when the
    user may still read them (others are silently dropped)."""
    values: dict[str, Any] = {}
    owner = _OwnerOnly(principal.id)
    for f in fields:
        raw = source.get(f.name) if source is not None and f.name in source else f.default
        if f.kind in ("file", "files"):
            ids = raw if isinstance(raw, list) else ([raw] if raw else [])
            infos = []
            for fid in ids:
                try:
                    row = await store.get(conn, fid, owner, approvers=False)
                except NotFound:
                    continue
                infos.append(file_info(row))
            values[f.name] = infos
        else:
            values[f.name] = display_value(f, raw, tz)
    return values


def file_info(row: Any) -> dict[str, Any]:
    """``{"id", "name", "size"}`` of a file row, for showing a kept upload."""
    return {"id": str(row["id"]), "name": row["name"], "size": row["size"]}


# --- parsing submitted values ----------------------------------------------------------------------


def _is_upload(value: Any) -> bool:
    return hasattr(value, "filename") and hasattr(value, "file") and bool(getattr(value, "filename", ""))


async def parse_form(
    fields: list[FormField],
    form: Any,
    *,
    tz: ZoneInfo,
    conn: Any,
    store: FileStore,
    principal: Any,
    max_upload_bytes: int,
    settings: Settings | None = None,
    key: str | None = None,
) -> ParsedForm:
    """Turn the submitted form (a ``FormMultiDict``) into schema input, storing uploads.

    Empty optional controls are left out, so the schema default applies. Uploads are stored in the
    caller's transaction, owned by ``principal``, with the form's one-time ``key``: the form sent
    again with the same file (a reload of a form shown with errors, a double click) reuses the file
    stored the first time (:func:`app.actions.files.store_upload`). A file kept from an earlier,
    re-rendered submission (``_keep.<field>``) is reused when it belongs to ``principal`` (admins
    included: a job may only use its owner's files).
    """
    out = ParsedForm()
    for f in fields:
        if f.kind in ("file", "files"):
            await _parse_files(f, form, out, conn, store, principal, (max_upload_bytes, settings, key))
        elif f.kind == "boolean":
            checked = checkbox(form.get(f.name))
            out.values[f.name] = bool(checked)
            if checked is None:
                out.errors[f.name] = NOT_A_CHECKBOX
            else:
                out.data[f.name] = checked
        else:
            _parse_text(f, form, out, tz)
    return out


def _parse_text(f: FormField, form: Any, out: ParsedForm, tz: ZoneInfo) -> None:
    name = f.name
    raw = form.get(name)
    raw = raw if isinstance(raw, str) else ""
    if f.kind in ("textarea", "list", "json"):
        raw = raw.replace("\r\n", "\n")
    out.values[name] = raw
    if raw.strip() == "":
        if f.required:
            out.errors[name] = "Choose one of the options." if f.kind == "choice" else "Fill this in."
        return
    value, problem = convert(f, raw, tz)
    if problem:
        out.errors[name] = problem
    else:
        out.data[name] = value


KEPT_FILE_GONE = "A file chosen before is no longer here (or is not yours); choose it again."


async def _kept_files(
    form: Any, name: str, conn: Any, store: FileStore, principal: Any
) -> tuple[list[dict[str, Any]], bool]:
    """Files kept from an earlier submission of the form, if they are the principal's own, and whether
    one named was not (another person's id, an unknown one, a file deleted since): that is an error
    next to the field, not a job that silently runs without the file."""
    owner = _OwnerOnly(principal.id)
    infos: list[dict[str, Any]] = []
    gone = False
    for kept in form.getall(f"{KEEP}.{name}", []):
        if not isinstance(kept, str) or not kept:
            continue
        try:
            row = await store.get(conn, kept, owner, approvers=False)
        except NotFound:
            gone = True
            continue
        infos.append(file_info(row))
    return infos, gone


async def _parse_files(
    f: FormField,
    form: Any,
    out: ParsedForm,
    conn: Any,
    store: FileStore,
    principal: Any,
    limits: tuple[int, Settings | None, str | None],
) -> None:
    name = f.name
    infos, gone = await _kept_files(form, name, conn, store, principal)
    problem = KEPT_FILE_GONE if gone else None
    max_upload_bytes, settings, key = limits
    for upload in [u for u in form.getall(name, []) if _is_upload(u)]:
        try:
            stored, problem_here, _ = await store_upload(
                upload,
                conn,
                store,
                user_id=principal.id,
                max_bytes=max_upload_bytes,
                person=principal,
                settings=settings,
                form_key=key,
            )
        except RateLimited as exc:
            stored, problem_here = None, exc.detail
        if stored is None:
            problem = problem or problem_here
            out.too_large = out.too_large or bool(problem_here and "largest" in problem_here)
            continue
        if stored["id"] not in out.new_files:
            out.new_files.append(stored["id"])
        if all(i["id"] != str(stored["id"]) for i in infos):
            infos.append(file_info(stored))
    if f.kind == "file" and len(infos) > 1:
        infos = infos[-1:]  # a new upload replaces the kept one
    out.values[name] = infos
    if problem:
        out.errors[name] = problem
    elif infos:
        out.data[name] = infos[0]["id"] if f.kind == "file" else [i["id"] for i in infos]
    elif f.required:
        out.errors[name] = "Choose a file." if f.kind == "file" else "Choose at least one file."
