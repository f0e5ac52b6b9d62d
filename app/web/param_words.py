"""What a route's query (or path, header, cookie) parameter takes, in words, for the 422 when a request's
value does not fit, and what a JSON body's field takes when the body's decoder refuses its value (the
same words, from the body's declared type): Litestar passes on its decoder's text ("Expected `int`, got `str`", "Expected `int`
>= 1", "Invalid UUID"), which names a Python type and says nothing of what to send. The words are made
from the parameter's declaration (its type and its ``QueryParameter`` bounds), so every parameter of
every route, a new one included, is described without a list to keep up.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
from datetime import date, datetime
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints
from uuid import UUID

from app.jobs.run_at import EXAMPLE

ID_EXAMPLE = "01a20000-0000-7000-8000-000000000000"
PARAMETERS = frozenset({"query", "path", "header", "cookie"})
"""The ``source`` of a Litestar validation error that is a parameter (not the body)."""
_DECODER_WORDS = ("Expected `", "Invalid ")
_MISSING = re.compile(r"^Missing required (\w+) parameter '([^']+)'")


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _range(kwargs: Any) -> str:
    """`` from 1 to 200`` / `` of at least 1`` / `` of at most 60``; ``""`` without bounds."""
    low = next((v for v in (getattr(kwargs, "ge", None), getattr(kwargs, "gt", None)) if v is not None), None)
    high = next(
        (v for v in (getattr(kwargs, "le", None), getattr(kwargs, "lt", None)) if v is not None), None
    )
    strict_low = getattr(kwargs, "ge", None) is None and low is not None
    strict_high = getattr(kwargs, "le", None) is None and high is not None
    if low is not None and high is not None and not (strict_low or strict_high):
        return f" from {_number(low)} to {_number(high)}"
    parts = []
    if low is not None:
        parts.append(f"{'above' if strict_low else 'at least'} {_number(low)}")
    if high is not None:
        parts.append(f"{'below' if strict_high else 'at most'} {_number(high)}")
    return " " + " and ".join(parts) if parts else ""


def _plain(annotation: Any) -> Any:
    """The annotation without ``None`` (``int | None`` → ``int``); a union of several kinds stays."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return members[0] if len(members) == 1 else annotation
    return annotation


def describe(annotation: Any, kwargs: Any = None) -> str | None:
    """``must be a whole number from 1 to 200`` and the like for a parameter of type ``annotation``
    declared with ``kwargs`` (its ``QueryParameter``); ``None`` for a type this does not know."""
    tp = _plain(annotation)
    if tp is bool:
        return "must be true or false"
    if tp is int:
        return "must be a whole number" + _range(kwargs)
    if tp is float:
        return "must be a number" + _range(kwargs)
    if tp is UUID:
        return f"must be an id, e.g. {ID_EXAMPLE}"
    if tp is datetime:
        return f"must be a date and time with a UTC offset, e.g. {EXAMPLE}"
    if tp is date:
        return "must be a date, e.g. 2026-12-31"
    if get_origin(tp) is Literal:
        return "must be one of " + ", ".join(str(v) for v in get_args(tp))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "must be one of " + ", ".join(str(m.value) for m in tp)
    if tp is str:
        low, high = getattr(kwargs, "min_length", None), getattr(kwargs, "max_length", None)
        if low and high:
            return f"must be {low:,} to {high:,} characters"
        if high is not None:
            return f"must be at most {high:,} characters"
        if low:
            return f"must be at least {low:,} characters"
    return None


def _noun(tp: Any) -> str | None:
    """What a value of type ``tp`` is, in words (``text``, ``a list of ids``); ``None`` when unknown."""
    if tp is Any:
        return None
    members = _members_of(tp)
    if len(members) > 1:
        nouns = [_noun(m) for m in members]
        return None if None in nouns else " or ".join(n for n in nouns if n)
    tp = members[0]
    origin = get_origin(tp) or tp
    if origin in (list, tuple, set, frozenset):
        item = (get_args(tp) or (Any,))[0]
        each = _noun(item)
        return f"a list of {_PLURALS.get(each, each)}" if each else "a list"
    if origin is dict or (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return "an object"
    if tp is str:
        return "text"
    words = describe(tp)
    return words.removeprefix("must be ") if words else None


_PLURALS = {
    "text": "text values",
    "a whole number": "whole numbers",
    "a number": "numbers",
    "an object": "objects",
    f"an id, e.g. {ID_EXAMPLE}": f"ids (e.g. {ID_EXAMPLE})",
}


def _at(annotation: Any, path: str) -> Any:
    """The type of the value at ``path`` (``steps[0].for_each``) in a body of type ``annotation``;
    ``None`` when the path leads nowhere known."""
    tp = annotation
    for name, index in _STEPS.findall(path):
        members = _members_of(tp)
        if index:
            lists = [m for m in members if (get_origin(m) or m) in (list, tuple)]
            if len(lists) != 1:
                return None
            tp = (get_args(lists[0]) or (Any,))[0]
        else:
            classes = [m for m in members if isinstance(m, type) and dataclasses.is_dataclass(m)]
            if len(classes) != 1:
                return None
            hints = get_type_hints(classes[0])
            if name not in hints:
                return None
            tp = hints[name]
    return tp


_STEPS = re.compile(r"\.?([^.\[\]]+)|\[(\d+)\]")


def _members_of(tp: Any) -> list[Any]:
    if get_origin(tp) in (Union, types.UnionType):
        return [a for a in get_args(tp) if a is not type(None)]
    return [tp]


def body_words(handler: Any, path: str) -> str | None:
    """What the body field at ``path`` (``tags``, ``steps[0].for_each``, ``dependent_on_jobs[0]``) of
    ``handler``'s declared body takes, in words (``must be a list of texts``); ``None`` when unknown."""
    field = getattr(handler, "parsed_data_field", None)
    if field is None:
        return None
    tp = _at(field.annotation, path)
    if tp is None:
        return None
    noun = _noun(tp)
    return f"must be {noun}" if noun else None


def parameter_words(handler: Any, name: str) -> str | None:
    """What the parameter sent as ``name`` (its name in the request, e.g. ``type`` for an argument
    declared ``QueryParameter(name="type")``) of ``handler`` takes, in words; ``None`` when the handler
    has no such parameter or its type is one :func:`describe` does not know."""
    signature = getattr(handler, "parsed_fn_signature", None)
    for arg, field in (getattr(signature, "parameters", None) or {}).items():
        kwargs = field.kwarg_definition
        if (getattr(kwargs, "name", None) or arg) == name:
            return describe(field.annotation, kwargs)
    return None


def refusal(exc: Any, handler: Any) -> tuple[str, dict[str, str]]:
    """The 422's ``detail`` and ``errors`` (each field's problem) for Litestar's ``ValidationException``
    ``exc`` raised reading ``handler``'s request: a parameter's problem in the words of
    :func:`parameter_words`, anything else as the decoder put it."""
    errors: dict[str, str] = {}
    for item in exc.extra if isinstance(exc.extra, list) else []:
        if isinstance(item, dict):
            key = str(item.get("key") or item.get("source") or "request")
            message = str(item.get("message", "invalid value"))
            if item.get("source") in PARAMETERS:
                words = parameter_words(handler, key)
            elif message.startswith(_DECODER_WORDS):
                # the body's decoder names a Python type ("Expected `array | null`, got `str`")
                words = body_words(handler, key)
            else:
                words = None
            errors[key] = words or message
    missing = _MISSING.match(exc.detail or "")
    if missing and not errors:
        errors[missing.group(2)] = f"a {missing.group(1)} parameter is required"
    if not errors:
        return f"Invalid request: {exc.detail}", errors
    return "; ".join(f"{k}: {v}" for k, v in errors.items()), errors
