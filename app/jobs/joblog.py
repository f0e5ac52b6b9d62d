"""A job's log: the lines its processor logged while it ran, stored per job in ``job_logs``.

Written in batches by the worker's log writer (:mod:`app.worker.joblog`) and read by the job page, its
poll, ``/jobs/{id}/log.txt`` and ``GET /api/jobs/{id}/log``. Each job keeps at most :data:`MAX_LINES`
lines and :data:`MAX_BYTES` bytes of text: older lines are cut, leaving one marker row (``level =
'cut'``) whose ``cut`` counts them, so a processor that logs without end costs a bounded amount of
storage. Lines are deleted with their job (``ON DELETE CASCADE``), so retention prunes them too.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.payload import cap_text

MAX_LINES = 1000
"""Lines kept per job (the newest)."""
MAX_BYTES = 256 * 1024
"""Bytes of text kept per job (the newest lines)."""
LINE_CAP_BYTES = 4096
"""Bytes kept of one line (longer lines end with a truncation marker)."""
CUT = "cut"
"""The level of the marker row that stands for the lines cut."""
READ_LIMIT = 2000
"""Most lines one read returns (a page of the API; the bound keeps a job under it)."""


@dataclass(slots=True)
class Line:
    """One line waiting to be written."""

    job_id: uuid.UUID
    attempt: int
    at: datetime
    level: str
    text: str
    cut: int = 0


def clean(message: str) -> str:
    """A line as it is stored: storable (NUL bytes, lone surrogates) and at most :data:`LINE_CAP_BYTES`."""
    return cap_text(message, LINE_CAP_BYTES) or ""


def cut_text(n: int) -> str:
    return f"… {n} earlier line{'s' if n != 1 else ''} cut"


INSERT_LINES = text(
    """
    INSERT INTO job_logs (job_id, attempt, at, level, text, cut)
    SELECT j, a, t, l, x, c FROM unnest(
        CAST(:jobs AS uuid[]), CAST(:attempts AS int[]), CAST(:ats AS timestamptz[]),
        CAST(:levels AS text[]), CAST(:texts AS text[]), CAST(:cuts AS int[])
    ) WITH ORDINALITY AS u(j, a, t, l, x, c, n)
    ORDER BY n
    """
)
LOCK_JOB = text(
    "SELECT pg_advisory_xact_lock(hashtextextended('job_logs:' || CAST(CAST(:job AS uuid) AS text), 0))"
)
DELETE_OLDEST = text(
    """
    WITH ranked AS (
        SELECT seq, row_number() OVER w AS n, sum(octet_length(text)) OVER w AS bytes
        FROM job_logs WHERE job_id = :job AND level <> 'cut'
        WINDOW w AS (ORDER BY seq DESC)
    )
    DELETE FROM job_logs WHERE seq IN (SELECT seq FROM ranked WHERE n > :max_lines OR bytes > :max_bytes)
    RETURNING seq
    """
)
DELETE_LEADING_MARKERS = text(
    """
    DELETE FROM job_logs
    WHERE job_id = :job AND level = 'cut'
      AND seq < COALESCE((SELECT min(seq) FROM job_logs WHERE job_id = :job AND level <> 'cut'), 9223372036854775807)
    RETURNING seq, cut
    """
)
INSERT_MARKER = text(
    """
    INSERT INTO job_logs (seq, job_id, attempt, level, text, cut)
    VALUES (:seq, :job, :attempt, 'cut', :text, :cut)
    """
)


async def write(
    conn: AsyncConnection, lines: Sequence[Line], *, max_lines: int = MAX_LINES, max_bytes: int = MAX_BYTES
) -> None:
    """Insert ``lines`` (in order) and cut each of their jobs' logs back to the bound, in the caller's
    transaction. Lines of a job that no longer exists are dropped with no error."""
    if not lines:
        return
    jobs = sorted({ln.job_id for ln in lines}, key=str)
    existing = await conn.execute(
        text("SELECT id FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))"), {"ids": jobs}
    )
    alive = {r[0] for r in existing}
    lines = [ln for ln in lines if ln.job_id in alive]
    if not lines:
        return
    for job in sorted(alive, key=str):  # one writer per job at a time, so its lines' seq is commit order
        await conn.execute(LOCK_JOB, {"job": job})
    await conn.execute(
        INSERT_LINES,
        {
            "jobs": [ln.job_id for ln in lines],
            "attempts": [ln.attempt for ln in lines],
            "ats": [ln.at for ln in lines],
            "levels": [ln.level for ln in lines],
            "texts": [clean(ln.text) for ln in lines],
            "cuts": [ln.cut for ln in lines],
        },
    )
    attempts = {ln.job_id: ln.attempt for ln in lines}
    for job in sorted(attempts, key=str):
        await trim(conn, job, attempts[job], max_lines=max_lines, max_bytes=max_bytes)


async def trim(
    conn: AsyncConnection,
    job: uuid.UUID,
    attempt: int,
    *,
    max_lines: int = MAX_LINES,
    max_bytes: int = MAX_BYTES,
) -> int:
    """Cut ``job``'s log to its newest ``max_lines`` lines and ``max_bytes`` bytes; the lines cut (and
    earlier markers before the first line kept) become one marker before the lines kept. Returns how many
    lines the log has lost in all."""
    await conn.execute(LOCK_JOB, {"job": job})
    deleted = [
        r[0]
        for r in await conn.execute(
            DELETE_OLDEST, {"job": job, "max_lines": max_lines, "max_bytes": max_bytes}
        )
    ]
    markers = (await conn.execute(DELETE_LEADING_MARKERS, {"job": job})).all()
    total = len(deleted) + sum(int(m[1]) for m in markers)
    if total:
        seq = max([*deleted, *(m[0] for m in markers)])
        await conn.execute(
            INSERT_MARKER, {"seq": seq, "job": job, "attempt": attempt, "text": cut_text(total), "cut": total}
        )
    return total


READ_LINES = text(
    """
    SELECT seq, at, level, text, attempt, cut FROM job_logs
    WHERE job_id = :job AND seq > :after AND seq <= :upto
    ORDER BY seq LIMIT :limit
    """
)
CUT_TOTAL = text("SELECT COALESCE(sum(cut), 0) FROM job_logs WHERE job_id = :job AND level = 'cut'")
LAST_SEQ = text("SELECT max(seq) FROM job_logs WHERE job_id = :job")


async def read(
    conn: Any, job: uuid.UUID, *, after: int = 0, upto: int | None = None, limit: int = READ_LIMIT
) -> list[dict[str, Any]]:
    """The job's lines (markers included, ``level = 'cut'``) with ``after < seq <= upto``, oldest first.
    ``conn`` is a connection or a session."""
    params = {"job": job, "after": after, "upto": upto if upto is not None else 2**63 - 1, "limit": limit}
    return [dict(r) for r in (await conn.execute(READ_LINES, params)).mappings().all()]


async def cut_total(conn: Any, job: uuid.UUID) -> int:
    """How many lines of the job's log were cut."""
    return int((await conn.execute(CUT_TOTAL, {"job": job})).scalar_one())


async def last_seq(conn: Any, job: uuid.UUID) -> int:
    """The newest line's ``seq`` (0 when nothing was logged)."""
    return int((await conn.execute(LAST_SEQ, {"job": job})).scalar_one() or 0)


def as_text(lines: Sequence[dict[str, Any]]) -> str:
    """The lines as a plain-text file: ``<time> <LEVEL> [attempt n] text`` per line, the time in UTC and
    marked so (the file is read away from the page and its reader's zone)."""
    out = []
    for ln in lines:
        if ln["level"] == CUT:
            out.append(ln["text"])
        else:
            at = ln["at"].astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            out.append(f"{at} {ln['level'].upper():7} [attempt {ln['attempt']}] {ln['text']}")
    return "\n".join(out) + ("\n" if out else "")
