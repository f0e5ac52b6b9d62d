"""A name for a job its owner did not name, taken from what it works on: the uploaded file's name, the
URL's host and path, or the e-mail's subject — so that ten "Make thumbnails" jobs in My jobs can be
told apart.

Pure functions over a job's input: the caller passes the names of the files the input refers to (it
has already checked their owner). Used when a job is submitted (its ``title`` is stored, so lists and
the API read it without loading the input) and by the job page for jobs submitted before.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from app.formatting import isolated, url_host
from app.jobs.file_inputs import file_ids_in
from app.jobs.types import InputModel

NAME_MAX = 80
"""Characters of a derived name; a longer file name, path or subject is cut with "…"."""
SUBJECT_FIELDS = ("subject", "title")
"""Input fields whose text names the job when there is no file or URL (an e-mail's subject)."""


def _cut(text: str, limit: int = NAME_MAX) -> str:
    text = " ".join(text.replace("\x00", "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def url_words(value: str) -> str | None:
    """``https://www.example.com/reports/q3?x=1`` → ``example.com/reports/q3``; ``None`` for a value that
    is not an http(s) URL with a host."""
    if not isinstance(value, str) or not value.lower().startswith(("http://", "https://")):
        return None
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname or ""
    except ValueError:
        return None
    if not host:
        return None
    host = url_host(host.removeprefix("www."))
    path = parts.path.rstrip("/")
    return _cut(host + path)


def _file_words(model: InputModel, data: Mapping[str, Any], names: Mapping[str, str]) -> str | None:
    ids: list[uuid.UUID] = [i for found in file_ids_in(model, dict(data)).values() for i in found]
    known = [names[str(i)] for i in ids if str(i) in names]
    if not known:
        return None
    first = _cut(known[0])
    rest = len(ids) - 1
    # a file name beside our words is set apart: one holding U+202E would reverse " and 4 more"
    return first if rest == 0 else f"{isolated(first)} and {rest} more"


def name_from_input(model: InputModel | None, data: Any, file_names: Mapping[str, str]) -> str | None:
    """The job's name from its input, or ``None`` when nothing in it names the job.

    In order: the first uploaded file's name ("holiday.jpg and 4 more"), the first http(s) URL's host and
    path, an e-mail's subject. ``file_names``: ``{file id: file name}`` for the input's files.
    """
    if not isinstance(data, Mapping) or not data:
        return None
    if model is not None:
        found = _file_words(model, data, file_names)
        if found:
            return found
    for value in data.values():
        words = url_words(value) if isinstance(value, str) else None
        if words:
            return words
    for key in SUBJECT_FIELDS:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return _cut(value)
    return None


def step_name(title: str | None, type_title: str, step_key: str | None) -> str:
    """A pipeline step's name: the title it was given; else its type's title with its step key
    ("Send a web request (webhook) · notify-sales"), so that untitled steps of one type — an ad-hoc
    pipeline's three webhooks — can be told apart on the page, in its history and in the API."""
    if title:
        return title
    return f"{type_title} · {_cut(step_key, 40)}" if step_key else type_title


def file_ids(model: InputModel | None, data: Any) -> list[uuid.UUID]:
    """The file ids :func:`name_from_input` needs names for (at most the first one is shown)."""
    if model is None or not isinstance(data, Mapping):
        return []
    return [i for found in file_ids_in(model, dict(data)).values() for i in found][:1]
