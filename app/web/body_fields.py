"""JSON bodies of the API checked against the fields their route declares, before they are converted.

The conversion into a route's body dataclass (msgspec, in Litestar's lax mode) drops a field it does not
know and turns text into a number or a flag: ``{"prioirty": 5}`` enqueued a job of priority 0,
``{"dependson": ["a"]}`` started a step without waiting for ``a``, ``{"max_runing": 3}`` on
``PUT /api/job-types/{type}/limits`` removed every limit of the type (a field left out means "no
limit"), ``{"requires_approval": "yes"}`` was refused but ``"true"`` and ``1`` were taken, and
``{"priority": "5"}`` was 5. Each is now a 422 naming the field:

* a field the body (or one of its nested objects, such as a pipeline's step) does not have: "unknown
  field", with the fields it has;
* a whole-number field given anything but a JSON integer (text, a fraction, ``true``), a yes/no field
  given anything but ``true`` or ``false``, a number field given anything but a JSON number, a date and
  time given anything but ISO text (a number was read as Unix time) — in the domain's words
  (:func:`app.jobs.run_at.text_problem`), not the decoder's.

``null`` is read by one rule on every route: for a field that may be left out, ``null`` is the same as
leaving it out (``{"priority": null}`` is priority 0, as ``{}`` is; a field typed to take ``null`` reads
it as its default already); a field that must be given, left out or sent as ``null``, is a 422 naming it
("is required", with what it takes) — ``{"run_at": null}`` and ``{}`` on reschedule named neither the
field nor what to send (the decoder's "Expected `datetime`, got `null`", or ``data``). A partial edit
(``PATCH /api/schedules/{id}``) refuses ``null`` itself, naming the field, where "left out" means "keep".
A body (or nested object) that is not a JSON object where one belongs is a 422 on its path, not ``data``;
a body of ``null`` is one of those, on every route (:func:`refuse_mismatch`, :func:`refuse_body`).

Free-form objects (``input_data``, a bulk ``filter``) are left to the rules that read them. A route
that declares no body (cancel, pause, enable…) takes none: a body other than ``{}`` is a 422 saying so
(:func:`refuse_body`), rather than being ignored — ``POST /api/job-types/x/pause {"paused": false}``
paused the type.
"""

from __future__ import annotations

import dataclasses
import json
import types
from datetime import datetime
from functools import lru_cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from app.errors import BadInput
from app.jobs.payload import storable_text
from app.jobs.run_at import text_problem as moment_text_problem
from app.web.param_words import describe

MAX_ERRORS = 20
"""At most this many fields are named in one answer."""

NO_BODY = "this request takes no body (send nothing, or {})"


@lru_cache(maxsize=256)
def _fields(cls: type) -> dict[str, Any]:
    """The fields of a body dataclass with their resolved types."""
    hints = get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}


@lru_cache(maxsize=256)
def _required(cls: type) -> frozenset[str]:
    """The fields of a body dataclass that have no default: a body must give them."""
    return frozenset(
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )


def _takes_null(tp: Any) -> bool:
    """Whether a field of type ``tp`` holds ``None`` itself (``int | None``, ``Any``)."""
    return tp is Any or tp is None or tp is type(None) or type(None) in get_args(tp)


def _path(base: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{base}[{key}]"
    shown = storable_text(str(key))[:100]
    return f"{base}.{shown}" if base else shown


def _members(tp: Any) -> list[Any] | None:
    """The members of a union other than ``None``; ``None`` when ``tp`` is not a union."""
    if get_origin(tp) in (Union, types.UnionType):
        return [a for a in get_args(tp) if a is not type(None)]
    return None


def _fits(value: Any, tp: Any) -> bool:
    """Whether the JSON kind of ``value`` (object, array, scalar) is the kind ``tp`` takes."""
    origin = get_origin(tp) or tp
    if isinstance(value, dict):
        return origin is dict or (isinstance(tp, type) and dataclasses.is_dataclass(tp))
    if isinstance(value, list):
        return origin is list
    return False


def _check(value: Any, tp: Any, path: str, errors: dict[str, str]) -> None:
    if value is None or len(errors) >= MAX_ERRORS:
        return  # null: the conversion says whether the field may be null
    members = _members(tp)
    if members is not None:
        if len(members) == 1:
            _check(value, members[0], path, errors)
            return
        picked = [m for m in members if _fits(value, m)]
        if len(picked) == 1:
            _check(value, picked[0], path, errors)
        return
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, dict):
            _check_object(value, tp, path, errors)
        else:
            errors[path or "body"] = "must be a JSON object with the fields " + ", ".join(_fields(tp))
        return
    if get_origin(tp) is list:
        item = (get_args(tp) or (Any,))[0]
        if isinstance(value, list):
            for i, v in enumerate(value):
                _check(v, item, _path(path, i), errors)
        return
    problem = _scalar_problem(value, tp)
    if problem is not None:
        errors[path or "body"] = problem


def _scalar_problem(value: Any, tp: Any) -> str | None:
    if tp is datetime:
        return moment_text_problem(value)
    if tp is bool and not isinstance(value, bool):
        return "must be true or false"
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        return "must be a whole number"
    if tp is float and (isinstance(value, bool) or not isinstance(value, int | float)):
        return "must be a number"
    return None


_KINDS: dict[Any, str] = {str: "must be text", list: "must be a list", dict: "must be an object"}


def _required_words(tp: Any) -> str:
    """``is required`` with what the field takes, when that is known."""
    words = describe(tp) or _KINDS.get(get_origin(tp) or tp)
    return f"is required; it {words}" if words else "is required"


def _check_object(value: dict[Any, Any], cls: type, path: str, errors: dict[str, str]) -> None:
    """Check ``value`` against the body dataclass ``cls``; a ``null`` for a field that may be left out and
    does not hold ``None`` itself is removed from ``value``, so that the conversion gives the field its
    default (the rule of the module docstring)."""
    fields = _fields(cls)
    required = _required(cls)
    for key, item in list(value.items()):
        if len(errors) >= MAX_ERRORS:
            return
        if key not in fields:
            errors[_path(path, key)] = f"unknown field; the fields are {', '.join(fields)}"
        elif item is None and not _takes_null(fields[key]):
            if key in required:
                errors[_path(path, key)] = _required_words(fields[key])
            else:
                del value[key]
        else:
            _check(item, fields[key], _path(path, key), errors)
    for key in sorted(required - value.keys(), key=list(fields).index):
        if len(errors) >= MAX_ERRORS:
            return
        errors[_path(path, key)] = _required_words(fields[key])


def _object_words(annotation: Any) -> str:
    """What a body of type ``annotation`` must be: a JSON object, with its dataclass's fields."""
    for tp in (annotation, *(_members(annotation) or ())):
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            return "must be a JSON object with the fields " + ", ".join(_fields(tp))
    return "must be a JSON object"


def refuse_mismatch(value: Any, annotation: Any, *, sent: bool = True) -> None:
    """Refuse a decoded JSON body that does not fit the route's body type ``annotation``, as described in
    the module docstring. Anything this does not look at is left to the conversion. ``sent`` says the
    request had a body: a body of ``null`` is then refused like ``[]`` or ``1`` (even where the body may
    be left out, which the decoder also reads as ``None``: it was taken as "no body", approving a step).

    Raises:
        BadInput: naming every field found (at most :data:`MAX_ERRORS`).
    """
    errors: dict[str, str] = {}
    if value is None and sent:
        errors["body"] = _object_words(annotation)
    _check(value, annotation, "", errors)
    if errors:
        first, message = next(iter(errors.items()))
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise BadInput(f"{first}: {message}{more}", errors=errors)


def _empty(body: bytes) -> bool:
    text = body.strip()
    if not text:
        return True
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return value == {}


def refuse_body(body: bytes) -> None:
    """Refuse a body sent to a route that declares none, unless it is empty or ``{}`` (``null`` is a body
    like ``[]``: it was taken, and the step approved or the job cancelled).

    Raises:
        BadInput: on ``body``, saying that the request takes none.
    """
    if not _empty(body):
        raise BadInput.field("body", NO_BODY)
