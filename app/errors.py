"""Errors with a message meant for a person, and the HTTP status each maps to.

Domain code (queue, pipelines, files, auth) raises these; the web layer (``app.server``) turns them into
JSON ``{"detail": …}`` for the API, an inline message for htmx fragments, or an error page — never a
500 for bad input: a person who sent something wrong is told what, and can fix it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class AppError(Exception):
    """Base class. ``detail`` is the readable message; ``status_code`` the HTTP status."""

    status_code = 400

    def __init__(self, detail: str, *, extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra or {}


class NotFound(AppError):
    """404. Also used for another user's object, so ids cannot be probed: a 403 would confirm that the
    id exists."""

    status_code = 404


class Forbidden(AppError):
    """403: signed in, but not allowed (e.g. admin-only)."""

    status_code = 403


class Unauthorized(AppError):
    """401: no valid credentials."""

    status_code = 401


GONE_MESSAGE = (
    "Something this request refers to was deleted while it was being handled. Nothing was changed; "
    "look again at what is there now before trying again."
)
"""The 409 of a row the database refused because a row it refers to was deleted meanwhile
(:func:`app.db.referent_deleted`)."""


class Conflict(AppError):
    """409: the object is not in a state where the action applies, e.g. cancelling a finished job."""

    status_code = 409


class KeyTaken(Conflict):
    """409: a one-time key already has what it made (a concurrent first request with it committed
    first); the caller answers the request as a repeat of that one."""


class NotJson(AppError):
    """415: a body sent to a route that reads JSON in another type: a form (multipart or urlencoded),
    ``text/plain``, or no ``Content-Type`` at all (:func:`app.web.input_guard.refuse_not_json`)."""

    status_code = 415

    def __init__(self, detail: str) -> None:
        super().__init__(detail, extra={"errors": {"body": detail}})


class BadInput(AppError):
    """422 with the offending field path (e.g. ``input_data.name``) and a reason per field.

    ``errors`` maps a dotted field path to its message; forms show each next to its field.
    """

    status_code = 422

    def __init__(self, detail: str, *, errors: dict[str, str] | None = None) -> None:
        super().__init__(detail, extra={"errors": errors or {}})
        self.errors = errors or {}

    @classmethod
    def field(cls, path: str, message: str) -> BadInput:
        return cls(f"{path}: {message}", errors={path: message})


class TooLargeFields(BadInput):
    """413 with ``errors`` like :class:`BadInput`'s: a request that checks many values at once (a batch's
    rows) and names every problem, one of them a value over its size limit. The status is the one every
    other route gives that value alone (:class:`TooLarge`); a form that shows each problem beside its
    field catches it as the :class:`BadInput` it also is."""

    status_code = 413


def differ_words(differs: Sequence[str], named: int | None = None) -> str:
    """`` (steps[1], name differ)``: what differs between a repeated key's request and the first one, in
    the words every :class:`KeyReused` gives it (a job's key, a pipeline's or a batch's form and API
    keys), its first ``named`` parts and how many more; nothing when that is not known."""
    if not differs:
        return ""
    shown = differs if named is None else differs[:named]
    more = len(differs) - len(shown)
    listed = ", ".join(shown) + (f" and {more:,} more" if more else "")
    return f" ({listed} {'differs' if len(differs) == 1 else 'differ'})"


class KeyReused(BadInput):
    """422: a one-time key — a job's ``idempotency_key``, a form's key — sent again with a request that
    differs from the one that first used it. A repeat of the same request is answered with what the
    first one made; a different request is refused rather than silently answered with the first one's
    job, pipeline or batch, as if it had gone in (the Idempotency-Key draft's and Stripe's rule).

    ``key_field`` (the ``field`` argument) is the key's field path (``idempotency_key``, ``jobs[3].idempotency_key``, ``_form_key``);
    ``kind`` and ``existing_id`` name what the first request made; ``differs`` the fields that differ
    (in a message's words: :func:`differ_words`).
    """

    def __init__(
        self,
        message: str,
        *,
        field: str = "idempotency_key",
        kind: str = "job",
        existing_id: Any = None,
        differs: tuple[str, ...] = (),
    ) -> None:
        super().__init__(f"{field}: {message}", errors={field: message})
        self.key_field = field
        self.kind = kind
        self.existing_id = existing_id
        self.differs = differs


class TooLarge(AppError):
    """413: the payload or upload is larger than the configured limit (named in the message). ``field``
    is the request's field that is too large (``input_data``), when one is."""

    status_code = 413

    def __init__(self, detail: str, *, field: str | None = None, extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail, extra=extra)
        self.field = field


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` refuses what was asked for a reason its words give a person — an :class:`AppError`
    answered 4xx: bad input, over a limit (:class:`TooLarge`), not allowed, not found, a conflict — rather
    than a fault (the database away, 503; a bug). A refusal is told in its words, without a traceback,
    wherever it is met: a request's answer, or a job's error when a processor's next jobs are refused."""
    return isinstance(exc, AppError) and 400 <= exc.status_code < 500


class RateLimited(AppError):
    """429: too many attempts; the message says when to try again."""

    status_code = 429


class Unavailable(AppError):
    """503: the database is unreachable or every pooled connection is busy (an answer the client can
    retry, rather than a request that hangs)."""

    status_code = 503
