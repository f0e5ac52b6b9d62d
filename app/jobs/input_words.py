"""What is wrong with one input field, in words a person who is not an engineer can act on.

One function for every path that checks a job's input against its type's schema: the job and pipeline
forms (:func:`app.web.submit.validate`), a batch's rows (spreadsheet or JSON) and the API
(:func:`app.jobs.types.validation_errors`). So a batch row's bad number reads "Enter a number, like 2.5."
exactly as the form's does, never as pydantic's "input should be a valid number, unable to parse string
as a number".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from app.formatting import plural


def number_text(value: Any) -> str:
    """A schema's bound as a person writes it: ``5``, not ``5.0``; ``1,000,000`` with the thousands
    separator every number in Jobdesk's messages has."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def _choices(ctx: Mapping[str, Any]) -> str:
    # The options are named: an API client or a spreadsheet's author has no drop-down to read them from.
    expected = ctx.get("expected")
    return f"Choose one of {expected}." if expected else "Choose one of the options."


_MESSAGES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "missing": lambda c: "Fill this in.",
    "greater_than_equal": lambda c: f"Must be at least {number_text(c.get('ge'))}.",
    "greater_than": lambda c: f"Must be more than {number_text(c.get('gt'))}.",
    "less_than_equal": lambda c: f"Must be at most {number_text(c.get('le'))}.",
    "less_than": lambda c: f"Must be less than {number_text(c.get('lt'))}.",
    "string_too_short": lambda c: f"Enter at least {plural(c.get('min_length'), 'character')}.",
    "string_too_long": lambda c: f"Use at most {plural(c.get('max_length'), 'character')}.",
    "too_short": lambda c: f"Give at least {plural(c.get('min_length'), 'item')}.",
    "too_long": lambda c: f"Give at most {plural(c.get('max_length'), 'item')}.",
    "literal_error": lambda c: _choices(c),
    "enum": lambda c: _choices(c),
    "string_pattern_mismatch": lambda c: "This is not in the expected form.",
    "multiple_of": lambda c: f"Must be a multiple of {number_text(c.get('multiple_of'))}.",
    "string_type": lambda c: "Enter text.",
    "bool_type": lambda c: "Choose yes or no (true or false).",
    "bool_parsing": lambda c: "Choose yes or no (true or false).",
    "list_type": lambda c: "Give a list of values.",
    "dict_type": lambda c: "Give an object of named values.",
    "model_type": lambda c: "Give an object of named values.",
    "uuid_type": lambda c: "Give an id, like 0190a3b0-0000-7000-8000-000000000001.",
    "uuid_parsing": lambda c: "Give an id, like 0190a3b0-0000-7000-8000-000000000001.",
}
"""Pydantic error types with a fixed sentence, or one built from the error's context."""

_PREFIXES = (
    (("int_",), "Enter a whole number, like 42."),
    (("float_", "decimal_"), "Enter a number, like 2.5."),
    (("datetime",), "Enter a date and a time."),
    (("date",), "Enter a date, like 2026-12-31."),
    (("time",), "Enter a time, like 09:30."),
    (("url_parsing", "url_type"), "Enter a web address, like https://example.com/."),
)
"""Families of pydantic error types by prefix, checked in order (``datetime`` before ``date``)."""

FILE_WORDS = {
    "file": "Give the id of an uploaded file (POST /api/files answers with it), as text.",
    "files": "Give a list of ids of uploaded files (POST /api/files answers with each).",
}
"""What a file field takes, said when it was given something else (an object, a number, a name)."""


MARKERS = ("$ref", "$literal", "$item")
"""The keys that make an object a pipeline step's marker rather than data (:mod:`app.jobs.graph`,
:mod:`app.jobs.fanout`)."""


def marker_words(value: Any) -> str | None:
    """What is wrong with ``value`` when it is shaped like a pipeline marker (``{"$ref": …}``,
    ``{"$literal": …}``, ``{"$item": …}``) where the schema refused it; ``None`` otherwise.

    A marker that is alone in its object reaches a schema check only where markers are not read — a
    plain job's input, a batch's row, a schedule's — since a pipeline step's markers are resolved or set
    aside before its check; one with other keys beside it is not a marker anywhere."""
    if not isinstance(value, dict):
        return None
    found = [m for m in MARKERS if m in value]
    if not found:
        return None
    marker = found[0]
    if len(value) > 1:
        others = ", ".join(sorted(repr(str(k)) for k in value if k != marker)[:5])
        return (
            f'An object with "{marker}" must have that one key only, like {{"{marker}": …}}; '
            f"remove the others ({others})."
        )
    return (
        f'"{marker}" works only in a pipeline step\'s input (POST /api/pipelines), where it reads '
        f"{_MARKER_READS[marker]}; here, give the value itself."
    )


_MARKER_READS = {
    "$ref": "a value from an earlier step's result",
    "$literal": "its value as it is",
    "$item": "an item of the step's for_each list",
}


def problem_words(
    error: Mapping[str, Any], file_widget: str | None = None, *, as_data: bool = False, noun: str = "item"
) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as a sentence; ``file_widget``
    (``"file"``/``"files"``) when the error is in a field that takes uploaded files. ``as_data``: the
    value was written inside a pipeline step's ``{"$literal": …}``, so a marker-shaped one is data, and
    is refused in the words any other value of its shape is (not as a marker misplaced). ``noun``: what
    one item of the field's list is (``picture``: :func:`app.jobs.file_inputs.item_nouns`), for a count of
    them ("Give at most 50 pictures.")."""
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    if kind == "too_short" and noun != "item":
        return f"Give at least {plural(ctx.get('min_length'), noun)}."
    if kind == "too_long" and noun != "item":
        return f"Give at most {plural(ctx.get('max_length'), noun)}."
    marker = None if as_data else marker_words(error.get("input"))
    if marker is not None and kind != "missing":
        return marker
    if file_widget in FILE_WORDS and kind not in ("missing", "too_short", "too_long"):
        return FILE_WORDS[file_widget]
    if kind in _MESSAGES:
        return _MESSAGES[kind](error.get("ctx") or {})
    for prefixes, sentence in _PREFIXES:
        if kind.startswith(prefixes):
            return sentence
    message = str(error.get("msg") or "This value is not valid.")
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return sentence_of(message)


def sentence_of(message: str) -> str:
    """``message`` with a capital first letter and a full stop (a word like "URL" left as it is)."""
    message = message.strip()
    if not message:
        return message
    return message[:1].upper() + message[1:] + ("" if message.endswith((".", "?", "!")) else ".")


# --- a value no person typed: a processor's next job, a ``$ref`` read at run time ------------------------
#
# The sentences above tell a person at a form what to type ("Fill this in.", "Enter text."). A processor's
# next job and a value a ``$ref`` read from an earlier step's result were written by code, not typed: their
# owner can change neither, so the words say what is wrong — which value, what it is, what it must be.

_NEEDS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "greater_than_equal": lambda c: f"at least {number_text(c.get('ge'))}",
    "greater_than": lambda c: f"more than {number_text(c.get('gt'))}",
    "less_than_equal": lambda c: f"at most {number_text(c.get('le'))}",
    "less_than": lambda c: f"less than {number_text(c.get('lt'))}",
    "string_too_short": lambda c: f"at least {plural(c.get('min_length'), 'character')} long",
    "string_too_long": lambda c: f"at most {plural(c.get('max_length'), 'character')} long",
    "too_short": lambda c: f"a list of at least {plural(c.get('min_length'), 'item')}",
    "too_long": lambda c: f"a list of at most {plural(c.get('max_length'), 'item')}",
    "literal_error": lambda c: f"one of {c['expected']}" if c.get("expected") else "one of its options",
    "enum": lambda c: f"one of {c['expected']}" if c.get("expected") else "one of its options",
    "string_pattern_mismatch": lambda c: "in the form its type expects",
    "multiple_of": lambda c: f"a multiple of {number_text(c.get('multiple_of'))}",
    "string_type": lambda c: "text",
    "bool_type": lambda c: "true or false",
    "bool_parsing": lambda c: "true or false",
    "list_type": lambda c: "a list",
    "dict_type": lambda c: "an object of named values",
    "model_type": lambda c: "an object of named values",
    "uuid_type": lambda c: "an id, like 0190a3b0-0000-7000-8000-000000000001",
    "uuid_parsing": lambda c: "an id, like 0190a3b0-0000-7000-8000-000000000001",
}
"""What a value must be, by pydantic error type: the end of "…; it must be <this>"."""

_NEEDS_BY_PREFIX = (
    (("int_",), "a whole number"),
    (("float_", "decimal_"), "a number"),
    (("datetime",), "a date and a time"),
    (("date",), "a date, like 2026-12-31"),
    (("time",), "a time, like 09:30"),
    (("url_parsing", "url_type"), "a web address, like https://example.com/"),
)

_FILE_NEEDS = {
    "file": "the id of one of its owner's uploaded files, as text",
    "files": "a list of ids of its owner's uploaded files",
}


def value_shown(value: Any) -> str:
    """A value as a sentence names it: a short one as JSON writes it, a long one or a container by its kind."""
    if value is None:
        return "null (no value)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return number_text(value) if isinstance(value, int) else str(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a text of {plural(len(value), 'character')}"
    if isinstance(value, dict):
        return "an object" if value else "an empty object"
    if isinstance(value, list):
        return f"a list of {plural(len(value), 'item')}" if value else "an empty list"
    return "a value of another kind"


def requirement(error: Mapping[str, Any], file_widget: str | None = None) -> str:
    """What is wrong with the value of one pydantic error, after the value is named: "it must be a whole
    number", "it must be at most 10"; its own words when Jobdesk has none for its kind."""
    kind = str(error.get("type", ""))
    if file_widget in _FILE_NEEDS and kind not in ("too_short", "too_long"):
        return f"it must be {_FILE_NEEDS[file_widget]}"
    if kind in _NEEDS:
        return f"it must be {_NEEDS[kind](error.get('ctx') or {})}"
    for prefixes, need in _NEEDS_BY_PREFIX:
        if kind.startswith(prefixes):
            return f"it must be {need}"
    message = str(error.get("msg") or "it is not valid")
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ").strip()
    return message[:1].lower() + message[1:].rstrip(".")


def field_named(loc: Sequence[int | str]) -> str:
    """An error's location in the input as its writer names it: ``name``, ``tags[2]``, ``extra.a``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "input"


def next_job_label(i: int, type_: Any, key: Any) -> str:
    """A processor's next job ``i`` (from 0) as the words of its refusals name it: "next job 1
    (images.contact_sheet, key 'sheet')"."""
    return f"next job {i + 1} ({str(type_)[:100]}" + (f", key {str(key)[:100]!r})" if key else ")")


def next_job_words(
    error: Mapping[str, Any], label: str, file_widget: str | None = None, *, as_data: bool = False
) -> str:
    """One schema error of a processor's next job (``label``: :func:`next_job_label`) in words, to follow
    "could not create the next jobs: ": "the next job 1 (test.form, key 'x') is missing its input 'name'"."""
    kind = str(error.get("type", ""))
    field = field_named(error.get("loc") or ())
    if kind == "missing":
        return f"the {label} is missing its input '{field}'"
    if kind == "extra_forbidden":
        return f"the {label} was given '{field}', which is not an input of its type"
    marker = None if as_data else marker_words(error.get("input"))
    if marker is not None:
        return f"the {label} has an object in '{field}' that is not read: {marker[:1].lower()}{marker[1:-1]}"
    shown = value_shown(error.get("input"))
    return f"the {label} was given {shown} for '{field}'; {requirement(error, file_widget)}"


def item_words(error: Mapping[str, Any], n: int, file_widget: str | None = None) -> str:
    """One schema error of the input made from item ``n`` (from 0) of a ``for_each`` list read from a
    parent's result, in words: "item 2 of its list gave 'x' for 'seconds'; it must be a number". The
    item is data an earlier step wrote, so a marker-shaped value in it is refused as any value of its
    shape is, and the form's "Enter a number" would tell the pipeline's owner to type what no one typed."""
    kind = str(error.get("type", ""))
    field = field_named(error.get("loc") or ())
    which = f"item {n + 1:,} of its list"
    if kind == "missing":
        return f"{which} left its input '{field}' missing"
    if kind == "extra_forbidden":
        return f"{which} gave '{field}', which is not an input of its type"
    return f"{which} gave {value_shown(error.get('input'))} for '{field}'; {requirement(error, file_widget)}"


def next_job_check_words(label: str, field: str, value: Any, text: str) -> str:
    """A processor's next job (``label``: :func:`next_job_label`) refused by its type's own check at
    submission (``text``, its words for the field): "the next job 1 (http.request) was given
    'http://10.0.0.1/' for 'url', which cannot be used: …"."""
    why = text.strip().rstrip(".")
    return f"the {label} was given {value_shown(value)} for '{field}', which cannot be used: {why}"


def next_job_parents_words(titles: Sequence[str]) -> str:
    """A processor's next job with no job before it, whose fields ``titles`` only the steps before it
    could fill (:meth:`~app.jobs.types.ProcessorSpec.parents_only`): what the processor left out, not a
    form's "choose …", which its owner could not follow."""
    what = " and ".join(f"'{title}'" for title in titles)
    return (
        f"the processor left {what} empty for the steps before this job to fill, and gave it no steps "
        "before it (its depends_on is empty): it must fill it in itself, or make the job depend on the "
        "jobs whose results fill it"
    )


def run_time_words(error: Mapping[str, Any], refs: Mapping[str, str], file_widget: str | None = None) -> str:
    """One schema error of a job's input as it runs, in words: when the value came from an earlier step's
    result (``refs``: the field each ``$ref`` filled, from :func:`field_named`, to the reference), "The
    value $ref 'a.v' gave for 'name' is an object; it must be text."; otherwise the stored value's."""
    loc = tuple(error.get("loc") or ())
    field = field_named(loc)
    kind = str(error.get("type", ""))
    ref = next((refs[f] for n in range(len(loc), 0, -1) if (f := field_named(loc[:n])) in refs), None)
    if kind == "missing":
        return f"Its input '{field}' is missing" + (f" from what $ref {ref!r} gave." if ref else ".")
    if kind == "extra_forbidden":
        return f"Its input has '{field}', which is not an input of its type."
    shown = value_shown(error.get("input"))
    where = f"The value $ref {ref!r} gave for '{field}'" if ref else f"Its input '{field}'"
    return f"{where} is {shown}; {requirement(error, file_widget)}."
