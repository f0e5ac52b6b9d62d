""" "Jobs waiting" on ``/admin``, split by what each waits for: ready to run now, an earlier step, a
decision (with a link to the approvals inbox), or its scheduled time. Each count is capped at
:data:`CAP` (shown as ``10,000+``) and read from a partial index, so the poll stays cheap on a large
table: ``ix_jobs_claim`` (ready), ``ix_jobs_waiting_parents`` (earlier step), ``ix_jobs_waiting_approval``
(decision) and ``ix_jobs_queued_run_at`` (scheduled, a range on ``run_at``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

CAP = 10_000
KINDS = ("ready", "parents", "approval", "scheduled")
LABELS = {
    "ready": "ready to run",
    "parents": "waiting for an earlier step",
    "approval": "waiting for approval",
    "scheduled": "scheduled",
}


def _capped(where: str) -> str:
    return f"(SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {where} LIMIT {CAP + 1}) s)"


WAITING_KINDS = text(
    "SELECT "
    + ", ".join(
        [
            _capped("status = 'queued' AND is_active AND pending_parents = 0 AND run_at <= now()")
            + " AS ready",
            _capped("status = 'queued' AND pending_parents > 0 AND run_at <= now()") + " AS parents",
            _capped("status = 'waiting_approval'") + " AS approval",
            # by run_at alone, so that the count reads the index only (a step due later that also waits
            # for its parents counts as scheduled)
            _capped("status = 'queued' AND run_at > now()") + " AS scheduled",
        ]
    )
)


async def waiting_kinds(db: AsyncSession) -> list[dict[str, Any]]:
    """``[{"kind", "label", "n", "capped"}]`` in the order of :data:`KINDS`."""
    row = (await db.execute(WAITING_KINDS)).mappings().one()
    return [
        {"kind": k, "label": LABELS[k], "n": min(int(row[k]), CAP), "capped": int(row[k]) > CAP}
        for k in KINDS
    ]
