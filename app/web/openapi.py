"""What the OpenAPI document (``/schema``) says about errors: every API route names the error statuses
it can answer with, each with the error body's schema, so generated clients know them.

Errors are ``{"detail": "…"}``, plus ``errors`` (``{field: message}``) on a 422. The statuses:

* 401 — no valid bearer token (missing, unknown, revoked or expired);
* 403 — signed in but not allowed (an admin route, a job type for admins only);
* 404 — unknown id, or another person's (one answer for both, so ids cannot be probed);
* 409 — the thing is not in a state that allows the action (already finished, not paused…);
* 413 — the body or an input is over its size limit (a batch names every row's problems in ``errors``, as on a 422);
* 415 — a route that reads a JSON body was sent a body of another type (a form, ``text/plain``, or no
  ``Content-Type``): send JSON;
* 422 — bad input, with the field named;
* 429 — too many requests (per-person limits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from litestar.openapi.datastructures import ResponseSpec

if TYPE_CHECKING:
    from litestar import Litestar


@dataclass
class ErrorBody:
    """An error answer: what went wrong in words, and for bad input the message per field."""

    detail: str
    errors: dict[str, str] | None = None


ERROR_WORDS = {
    400: "The request could not be read (malformed JSON or parameters).",
    401: "Missing or invalid API token: send the header Authorization: Bearer <token>.",
    403: "Signed in, but not allowed to do this.",
    404: "No such thing, or it is not yours.",
    409: "Not possible in the current state; the detail says why.",
    413: "The body or an input is larger than the configured limit.",
    415: (
        "The body is not sent as JSON (a form, text/plain, or no Content-Type): this route reads JSON; "
        "send Content-Type: application/json."
    ),
    422: "Bad input: the detail and errors name the field and what is wrong with it.",
    429: "Too many requests: the detail says when to try again.",
}
"""The description of each error status in the document."""


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """``responses=`` for a route decorator: each of ``statuses`` with :class:`ErrorBody` and its words."""
    return {
        status: ResponseSpec(
            data_container=ErrorBody, description=ERROR_WORDS[status], generate_examples=False
        )
        for status in statuses
    }


def plain_descriptions(app: Litestar) -> None:
    """On start-up: the operations' descriptions (the handlers' docstrings) with their reStructuredText
    literals (double backquotes) written as Markdown code, which Swagger and generated clients show as
    code, instead of as stray backquotes."""
    schema = app.openapi_schema
    for item in (schema.paths or {}).values():
        for method in ("get", "put", "post", "delete", "patch"):
            operation = getattr(item, method, None)
            if operation is not None and operation.description:
                operation.description = operation.description.replace("``", "`")


KEY_WORDS = (
    "Optional, 1–200 characters, unique per person. The same request sent again with it (the body as "
    "sent, without the key, as canonical JSON) answers 200 with the {} it started, whatever its state "
    "since, over your limits or not; a different request with it is refused (422 on idempotency_key). "
    "Send one to repeat safely a request that got no answer (a timeout, or a 503 saying the change may "
    "or may not have been made)."
)
"""The OpenAPI description of ``POST /api/pipelines``'s and ``POST /api/batches``'s ``idempotency_key``
(formatted with ``pipeline`` or ``batch``)."""
