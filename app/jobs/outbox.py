"""Alert outbox rows, written by the queue in the same transaction as the transition that causes them.

An alert exists if and only if its transition committed; nothing here performs I/O beyond the insert.
Delivery, grouping and rendering live in :mod:`app.alerts`, which reads these rows later. Every text
written here goes through :mod:`app.jobs.payload` (``json_text``, ``cap_text``, ``storable_text``), so an
error text PostgreSQL cannot hold never stops the transition that records it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.jobs.payload import cap_text, json_text, storable_text

PAYLOAD_ERROR_CAP = 4000
"""Characters of error text kept in an outbox row; channels trim further to their own limits."""

_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b[0-9a-f]{16,}\b", re.I)
_NUM = re.compile(r"\d+(?:\.\d+)?")


def error_fingerprint(error: str | None) -> str:
    """The error's first line with ids, hex and numbers blanked, at most 200 characters:
    ``"timeout after 30s on 10.0.0.7"`` and ``"timeout after 31s on 10.0.0.9"`` group together."""
    first = (error or "").strip().splitlines()[0] if (error or "").strip() else ""
    first = _UUID.sub("<id>", first)
    first = _HEX.sub("<hex>", first)
    first = _NUM.sub("<n>", first)
    return first[:200]


INSERT_ALERTS = text(
    """
    INSERT INTO alert_outbox (kind, fingerprint, payload)
    SELECT * FROM unnest(CAST(:kinds AS text[]), CAST(:fingerprints AS text[]), CAST(:payloads AS text[])::jsonb[])
    """
)


async def _insert(conn: AsyncConnection, alerts: Sequence[tuple[str, str, dict[str, Any]]]) -> None:
    if not alerts:
        return
    await conn.execute(
        INSERT_ALERTS,
        {
            "kinds": [a[0] for a in alerts],
            "fingerprints": [storable_text(a[1]) for a in alerts],
            "payloads": [json_text(a[2]) for a in alerts],
        },
    )


_MARKER = re.compile(r"…\[truncated, (\d+) bytes\]$")


def error_size(error: str | None) -> int | None:
    """Bytes of the full error text: the size named by a ``…[truncated, N bytes]`` marker that
    :func:`~app.jobs.payload.cap_text` left at its end, else the text's own UTF-8 size (so an alert
    says how large the error really was even after two cuts)."""
    if error is None:
        return None
    found = _MARKER.search(error[-64:])
    return int(found.group(1)) if found else len(error.encode("utf-8", errors="replace"))


def _job_payload(row: Any) -> dict[str, Any]:
    get = row.get if hasattr(row, "get") else lambda k, d=None: row[k] if k in row else d
    return {
        "job_id": str(row["id"]),
        "type": row["type"],
        "title": get("title"),
        "user_id": row["user_id"],
        "pipeline_id": str(get("pipeline_id")) if get("pipeline_id") else None,
        "step_key": get("step_key"),
        "attempts": get("attempts"),
        "max_attempts": get("max_attempts"),
        "error": cap_text(get("error_message"), PAYLOAD_ERROR_CAP),
        "error_size": error_size(get("error_message")),
    }


async def record_job_failures(conn: AsyncConnection, rows: Sequence[Any]) -> None:
    """One ``failed`` alert per standalone job that reached ``failed`` (rows from the queue's update)."""
    await _insert(
        conn,
        [
            ("failed", f"failed:{r['type']}:{error_fingerprint(r.get('error_message'))}", _job_payload(r))
            for r in rows
        ],
    )


async def record_rescue_failures(conn: AsyncConnection, rows: Sequence[Any]) -> None:
    """One ``failed`` alert (marked ``worker_lost``) per standalone job the sweep failed because its
    worker was lost on the last attempt; pipeline jobs alert through their pipeline."""
    await _insert(
        conn,
        [
            ("failed", f"failed:{r['type']}:worker lost", {**_job_payload(r), "worker_lost": True})
            for r in rows
            if r.get("pipeline_id") is None
        ],
    )


async def record_approvals(conn: AsyncConnection, rows: Sequence[Any], *, reminder: bool = False) -> None:
    """One ``approval_needed`` alert per step that now waits for a decision (``reminder``: one that has
    waited a whole ``approval_timeout`` since it began waiting or since the last reminder)."""
    extra = {"reminder": True} if reminder else {}
    await _insert(
        conn, [("approval_needed", f"approval_needed:{r['id']}", {**_job_payload(r), **extra}) for r in rows]
    )


FAILED_STEP = text(
    """
    SELECT id, type, title, step_key, error_message, attempts, max_attempts FROM jobs
    WHERE pipeline_id = :id AND status = 'failed' ORDER BY completed_at DESC LIMIT 1
    """
)


async def record_pipeline_failure(conn: AsyncConnection, pipeline: Any) -> None:
    """One ``pipeline_failed`` alert naming the failed step."""
    step = (await conn.execute(FAILED_STEP, {"id": pipeline["id"]})).mappings().first()
    payload = {
        "pipeline_id": str(pipeline["id"]),
        "name": pipeline["name"],
        "template": pipeline["template"],
        "user_id": pipeline["user_id"],
        "step": {
            "job_id": str(step["id"]),
            "type": step["type"],
            "title": step["title"],
            "key": step["step_key"],
            "attempts": step["attempts"],
            "max_attempts": step["max_attempts"],
            "error": cap_text(step["error_message"], PAYLOAD_ERROR_CAP),
            "error_size": error_size(step["error_message"]),
        }
        if step
        else None,
    }
    fingerprint = f"pipeline_failed:{pipeline['template'] or pipeline['name']}:{error_fingerprint(step['error_message'] if step else '')}"
    await _insert(conn, [("pipeline_failed", fingerprint, payload)])


async def record_admin_action(
    conn: AsyncConnection,
    *,
    admin_email: str,
    action: str,
    count: int,
    job_ids: Sequence[Any] = (),
    target_type: str = "job",
    targets: Sequence[Any] = (),
    outcome: str = "ok",
    detail: dict[str, Any] | None = None,
) -> None:
    """One ``admin_action`` notice per admin action (one per bulk action, with its count).
    ``target_type`` names what was acted on (``job``, ``pipeline``, ``job_type``, ``user``,
    ``schedule``) and ``targets`` which ones (the first 20 kept); ``job_ids`` are the jobs, linked in
    the notice."""
    payload = {
        "admin": admin_email,
        "action": action,
        "count": count,
        "job_ids": [str(j) for j in list(job_ids)[:20]],
        "target_type": target_type,
        "targets": [str(t) for t in list(targets or job_ids)[:20]],
        "outcome": outcome,
        "detail": detail or {},
    }
    await _insert(conn, [("admin_action", f"admin_action:{action}:{admin_email}", payload)])
