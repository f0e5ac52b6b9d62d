"""Idempotency keys of ``POST /api/pipelines`` and ``POST /api/batches``: the same contract as a job's key
(:mod:`app.jobs.queue.repeats`), for what the API asks for as a whole.

A key is unique per person (``uq_pipelines_user_id_idempotency_key``, ``uq_batches_…``). Sent again with
the same request it is answered with the pipeline or batch it made, whatever has become of it since;
sent with a different request it is refused (:class:`app.errors.KeyReused`, 422 on
``idempotency_key``), never answered with the first one's as if the second had gone in.

"The same request" is the request as the person sent it, without the key, in canonical JSON: object
keys sorted, a whole number written ``1`` whether it came as ``1`` or ``1.0``, and the fields the API
fills in (a step's ``depends_on: []``) filled in. Its SHA-256 is stored with the key
(``request_digest``) and a repeat is compared with that, not with the rows the request made: those
change (steps are cancelled, rows retried), and what was made from a request says too little of it
(two template inputs can build the same steps). After it, the same column keeps a short digest of
each field (each item of a list of up to :data:`ITEMS_NAMED`), so that a refusal can say what differs
(``steps[1] differs``) without the request itself being kept.

The key has its own column, apart from the forms' ``form_key``, so that a client's key and a form's
one-time key never answer for each other.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.errors import KeyReused, differ_words
from app.jobs.queue.repeats import check_key

Table = Literal["pipelines", "batches"]
_LOOKUP = {
    table: text(f"SELECT * FROM {table} WHERE user_id = :user_id AND idempotency_key = :key")
    for table in ("pipelines", "batches")
}
_KIND = {"pipelines": "pipeline", "batches": "batch"}


ITEMS_NAMED = 100
"""A list field of at most this many items has a digest per item; a longer one (a batch's rows), one."""
DIFFERS_NAMED = 5
"""How many differing fields a refusal names at most."""


@dataclass(frozen=True)
class Keyed:
    """A keyed request: the ``key`` the person sent, the ``digest`` of what they asked for with it, and
    the digests of its ``parts`` (fields, or a short list's items)."""

    key: str
    digest: str
    parts: dict[str, str]

    @property
    def stored(self) -> str:
        """What ``request_digest`` keeps: the digest, a space, the parts' digests as JSON."""
        return f"{self.digest} {json.dumps(self.parts, separators=(',', ':'), ensure_ascii=False)}"

    def differs(self, stored: str) -> tuple[str, ...]:
        """The parts in which the request ``stored`` (a ``request_digest``) differs from this one; empty
        when that row predates the parts."""
        _, _, kept = stored.partition(" ")
        try:
            theirs = json.loads(kept) if kept else {}
        except ValueError:
            return ()
        if not isinstance(theirs, dict) or not theirs:
            return ()
        names = [*self.parts, *(n for n in theirs if n not in self.parts)]
        return tuple(n for n in names if self.parts.get(n) != theirs.get(n))


def _normal(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        # JSON has one kind of number: 1.0 asks for what 1 does (as a job's input compared as jsonb).
        return int(value)
    return value


def digest(request: Any) -> str:
    """The SHA-256 (hex) of ``request`` in canonical JSON (:func:`_normal`, keys sorted, no spaces)."""
    canonical = json.dumps(
        _normal(request), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    # A lone surrogate is refused later, by the input checks; the digest must not fail before them.
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _parts(request: Mapping[str, Any]) -> dict[str, str]:
    """A short digest of each field of ``request``, of each item of a list of up to :data:`ITEMS_NAMED`."""
    parts: dict[str, str] = {}
    for name, value in request.items():
        if isinstance(value, list | tuple) and len(value) <= ITEMS_NAMED:
            parts.update({f"{name}[{i}]": digest(item)[:16] for i, item in enumerate(value)})
        else:
            parts[str(name)] = digest(value)[:16]
    return parts


def keyed(key: Any, request: Mapping[str, Any]) -> Keyed | None:
    """The key and digest of a request sent with ``idempotency_key`` ``key``; ``None`` without one.

    Raises:
        BadInput: on ``idempotency_key``: what :func:`app.jobs.queue.repeats.check_key` refuses.
    """
    if key is None:
        return None
    return Keyed(check_key(key), digest(request), _parts(request))


async def made_by(
    db: AsyncConnection | AsyncSession, table: Table, user_id: int, request: Keyed
) -> RowMapping | None:
    """The pipeline or batch (its row in ``table``) that ``user_id``'s key made, when this request is
    the one that made it; ``None`` when the key has made none.

    Raises:
        KeyReused: the key made one for a different request.
    """
    params = {"user_id": user_id, "key": request.key}
    row = (await db.execute(_LOOKUP[table], params)).mappings().first()
    if row is None:
        return None
    stored = str(row["request_digest"] or "")
    if stored.partition(" ")[0] != request.digest:
        kind = _KIND[table]
        differs = request.differs(stored)
        raise KeyReused(
            f"this key was already used for a different request, which made {kind} {row['id']}"
            f"{differ_words(differs, DIFFERS_NAMED)}; repeat that request exactly to get its {kind}, or send this one with "
            "a new key",
            field="idempotency_key",
            kind=kind,
            existing_id=row["id"],
            differs=differs,
        )
    return row
