"""Tags on jobs: short labels an API user gives a job (``tags`` of ``POST /api/jobs``) to find it again
with ``?tag=``. Kept in ``job_tags``, deleted with the job."""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.errors import BadInput
from app.jobs.payload import blank, text_problem

MAX_TAGS = 20
MAX_TAG_CHARS = 50


def check_tags(value: Any, field: str = "tags") -> list[str]:
    """``value`` as a list of distinct tags, in the order given.

    Raises:
        BadInput: not a list of at most 20 strings of 1 to 50 characters without control characters.
    """
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_TAGS:
        raise BadInput.field(field, f"give a list of at most {MAX_TAGS:,} tags")
    tags: list[str] = []
    for i, tag in enumerate(value):
        kept = read_tag(tag, f"{field}[{i}]")
        if kept not in tags:
            tags.append(kept)
    return tags


def read_tag(value: Any, field: str = "tag") -> str:
    """One tag as it is kept: a job's (:func:`check_tags`) and a list's ``?tag=`` filter alike, so that
    the filter finds what a submission stored. An empty ``?tag=`` listed nothing, as if no job could be
    asked for, and `` a`` missed the job tagged ``a``. In Unicode's composed form (NFC): ``café`` typed
    with a precomposed ``é`` and with ``e`` and a combining accent look the same and were two tags, each
    found by its own spelling only (migration 0028 made the stored ones so). Case is kept: a tag is a
    label its writer chose, and ``Nightly`` and ``nightly`` stay two.

    Raises:
        BadInput: naming ``field``: not text of 1 to 50 characters (spaces around it not counted; one of
            invisible characters only is empty, :func:`~app.jobs.payload.blank`), or
            with control characters.
    """
    if not isinstance(value, str):
        raise BadInput.field(field, f"a tag is 1 to {MAX_TAG_CHARS} characters")
    if text_problem(value) or any(ord(c) < 32 for c in value):
        raise BadInput.field(field, "a tag may not contain control characters")
    tag = unicodedata.normalize("NFC", value).strip()
    if blank(tag) or len(tag) > MAX_TAG_CHARS:  # only invisible characters: as empty
        raise BadInput.field(field, f"a tag is 1 to {MAX_TAG_CHARS} characters")
    return tag


ADD = text(
    "INSERT INTO job_tags (tag, job_id) SELECT unnest(CAST(:tags AS text[])), :job_id ON CONFLICT DO NOTHING"
)
OF = text("SELECT job_id, tag FROM job_tags WHERE job_id = ANY(CAST(:ids AS uuid[])) ORDER BY tag")


async def add_tags(db: AsyncConnection | AsyncSession, job_id: uuid.UUID, tags: Sequence[str]) -> None:
    if tags:
        await db.execute(ADD, {"tags": list(tags), "job_id": job_id})


async def tags_of(db: AsyncConnection | AsyncSession, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, list[str]]:
    """Each job's tags, sorted, by job id (jobs without tags are absent)."""
    out: dict[uuid.UUID, list[str]] = {}
    if ids:
        for r in (await db.execute(OF, {"ids": list(ids)})).mappings().all():
            out.setdefault(r["job_id"], []).append(r["tag"])
    return out


TAG_FILTER = "(CAST(:tag AS text) IS NULL OR id IN (SELECT job_id FROM job_tags WHERE tag = :tag))"
"""A ``WHERE`` condition for lists filtered by ``:tag`` (``NULL``: no filter)."""
