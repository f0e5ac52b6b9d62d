"""What a job's error says to whoever reads it: all of it for admins; for its owner, the message in plain
words (a traceback cut, file paths blanked, operating-system errors in words, no exception type names or
internal ids). The one rule for the pages, the API and callbacks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TRACEBACK_START = re.compile(
    r'^[ \t|+]*(?:Exception Group )?Traceback \(most recent call last\):|^[ \t|+]*File "', re.MULTILINE
)
_QUOTED_PATH = re.compile(r"""(['"])(?:/|~/|[A-Za-z]:\\)[^'"\n]*\1""")
UNEXPECTED_ERROR = "It stopped on an unexpected error; an administrator can read the details."


_ERRNO_WORDS = (
    (re.compile(r"(\S+ )?cannot be resolved \(\[Errno -[25]\][^)]*\)"), "the name does not exist"),
    (
        re.compile(r"\[Errno -[25]\] (Name or service not known|No address associated with hostname)"),
        "the name does not exist",
    ),
    (
        re.compile(r"(\S+ )?cannot be resolved \(\[Errno -3\][^)]*\)"),
        "the name could not be looked up just now",
    ),
    (
        re.compile(r"\[Errno -3\] Temporary failure in name resolution"),
        "the name could not be looked up just now",
    ),
    (re.compile(r"\[Errno 111\] Connection refused"), "the server refused the connection"),
    (re.compile(r"\[Errno 110\] (Connection|Operation) timed out"), "the server did not answer in time"),
    (re.compile(r"\[Errno 113\] No route to host"), "the server cannot be reached"),
    (re.compile(r"\[Errno 101\] Network is unreachable"), "the network cannot reach the server"),
    (re.compile(r"\[Errno 104\] Connection reset by peer"), "the server closed the connection"),
    (re.compile(r"\[Errno -?\d+\] ([^\n]*)"), lambda m: m.group(1)[:1].lower() + m.group(1)[1:]),
)
"""Operating-system error texts (``[Errno -2] Name or service not known``) in words."""
_TYPE_PREFIX = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Timeout|Failure)\b(?:: |$)"
)
_UPSTREAM = re.compile(
    r"^upstream (\S+) ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}) (failed|was cancelled|was removed)$"
)


INPUT_UNFIT = "the job's input is not valid for "
"""How the error of a job whose input does not fit its type when it runs begins (the worker's check, then
``<type>: input_data.<field>: <why>; …``): a ``$ref`` that read something of another shape, or a type
whose schema changed since. It fails at once, without retries, and a retry could not succeed either
(:func:`input_unfit`): the input, or what it reads, is the same the next time."""


def input_unfit(message: str | None) -> bool:
    """Whether a job failed because its input does not fit its type (:data:`INPUT_UNFIT`)."""
    return bool(message) and str(message).startswith(INPUT_UNFIT)


NEVER_CREATED = "could not create the next jobs: "
"""How the error of a processor's next job refused by its owner's waiting limit begins: it is recorded
failed as it is made (:mod:`app.jobs.queue.waiting`), never ran, and has none of the dependencies its plan
gave it, so a retry would run it on its own, out of its order and without what its ``$ref`` reads
(:func:`never_created`)."""


def never_created(message: str | None) -> bool:
    """Whether a job is a next job its owner's waiting limit refused as it was made (:data:`NEVER_CREATED`)."""
    return bool(message) and str(message).startswith(NEVER_CREATED)


def retry_refusal_kind(row: Mapping[Any, Any]) -> str | None:
    """What :func:`retry_refusal` refuses ``row`` for: ``"input_unfit"``, ``"never_created"``, or ``None``."""
    error = row.get("error_message") or row.get("error_preview")
    if row.get("never_created") or never_created(error):
        return "never_created"
    if row.get("input_unfit") or input_unfit(error):
        return "input_unfit"
    return None


def retry_refusal(row: Mapping[Any, Any]) -> str | None:
    """Why the failed job ``row`` may not be retried, in words that say what to do instead, or ``None``
    when it may. The one rule for every path: the pages hide "Retry" when it gives a reason, and
    :func:`app.jobs.queue.retry` (one job, a bulk retry, a batch's failed rows) refuses with it.

    A job whose input does not fit its type (:func:`input_unfit`) would fail the same way again: its
    input, and what its ``$ref`` reads, are the same the next time. A next job the owner's waiting limit
    refused (:func:`never_created`) would run out of its order. ``row`` is a job row (its
    ``error_message``, or the lists' ``error_preview``) or a pipeline page's step (``input_unfit``,
    ``never_created``).
    """
    kind = retry_refusal_kind(row)
    if kind is None:
        return None
    if kind == "never_created":
        return (
            "it never ran: its owner's waiting limit refused it when the job before it asked for it, so it "
            "has none of the steps it was to wait for; run that job again once there is room"
        )
    error = row.get("error_message") or row.get("error_preview")
    why = str(error)[len(INPUT_UNFIT) :].split(": ", 1)[-1] if input_unfit(error) else ""
    fields = f" ({why[:300]}{'…' if len(why) > 300 else ''})" if why else ""
    again = (
        "start the pipeline again with input that fits"
        if row.get("pipeline_id")
        else 'start it again with corrected input ("Edit and resubmit" on its page, or a new job)'
    )
    return f"its input does not fit its type{fields}, so a retry would fail the same way; {again}"


def plain_words(message: str) -> str:
    """An error text as an owner reads it: operating-system errors in words, no exception type name in
    front ("ValueError: …"), no internal ids: "Could not connect to example.com: the name does not
    exist" rather than "… example.com cannot be resolved ([Errno -2] Name or service not known)"."""
    text = message
    for pattern, words in _ERRNO_WORDS:
        text = pattern.sub(words, text)
    head = _TYPE_PREFIX.match(text)
    if head is not None:
        rest = text[head.end() :].strip()
        text = rest[:1].upper() + rest[1:] if rest else UNEXPECTED_ERROR
    upstream = _UPSTREAM.match(text.strip())
    if upstream is not None:
        text = f"an earlier step {upstream.group(3)}"
    return text


def upstream_of(message: str | None) -> tuple[str, str] | None:
    """``(job id, "failed" | "was cancelled" | "was removed")`` of an "upstream … failed" cancellation."""
    m = _UPSTREAM.match((message or "").strip())
    return (m.group(2), m.group(3)) if m else None


def viewer_is_admin(viewer: Any) -> bool:
    return bool(getattr(viewer, "is_admin", False))


def error_text_for(message: str | None, viewer: Any) -> str | None:
    """A stored error text as ``viewer`` may read it — the one rule for job pages, their fragments and
    the API. Admins read all of it. Anyone else (a job's owner) reads the message in words: when the
    text carries a traceback (an unexpected exception, not a message a processor wrote for people), the
    traceback is cut — its file paths and source lines describe the server, not the job — and quoted
    file paths in the exception's own message become ``'…'``."""
    if not message or viewer_is_admin(viewer):
        return message
    cut = _TRACEBACK_START.search(message)
    if cut is None:
        return plain_words(message)
    head = _QUOTED_PATH.sub(lambda m: m.group(1) + "…" + m.group(1), message[: cut.start()].strip())
    return plain_words(head) if head else UNEXPECTED_ERROR
