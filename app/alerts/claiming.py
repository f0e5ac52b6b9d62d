"""Claiming due outbox rows, and grouping repeats of one failure into a single summary.

**Claiming.** :func:`claim` takes due ``pending`` rows with ``FOR UPDATE SKIP LOCKED`` in a short
transaction that the caller commits before any HTTP request, so no database connection or transaction
is held while a channel answers slowly. A claimed row is leased by pushing its ``next_attempt_at``
:data:`CLAIM_LEASE_SECS` ahead, so a process that dies mid-delivery leaves it to another one. Kinds
missing from ``ALERT_ON`` become ``suppressed`` without a message, and rows still pending after
:data:`STALE_AFTER_SECS` (no channel was configured) are dropped as ``suppressed`` instead of flooding a
channel configured later.

**Grouping.** The first alert of a fingerprint (kind, job type, error's first line with numbers and ids
blanked) is sent and opens a window of ``ALERT_THROTTLE_SECS``, stored as a ``summary`` row whose
``next_attempt_at`` is the window's end. Alerts of that fingerprint arriving inside the window are
``suppressed`` (``payload.grouped_into`` names the summary) and counted on it; when the window ends the
summary is sent as one "…and N more like this" message (and opens the next window), or deleted if
nothing joined it. Every decision is made under a transaction-level advisory lock per fingerprint, so
several worker processes agree without any state in memory.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from app.alerts.queries import (
    ALERT_LOCK_NS,
    DELETE_ROWS,
    GROUP_INTO,
    INSERT_WINDOW,
    LEASE,
    LOCK_FINGERPRINT,
    NOW,
    OPEN_WINDOW,
    OWNERS,
    SELECT_DUE,
    SET_PAYLOAD,
    SUPPRESS,
)
from app.jobs.payload import json_text
from app.settings import Settings

CLAIM_LEASE_SECS = 60.0
"""A claimed alert is not claimed again for this long (a round takes at most
:data:`app.alerts.sending.SEND_TIMEOUT_SECS`)."""
CLAIM_BATCH = 200
"""Due rows looked at per round (grouping decisions are cheap; only a few are sent per round)."""
DELIVER_PER_ROUND = 8
"""Messages sent concurrently per round."""
STALE_AFTER_SECS = 24 * 3600.0
"""An alert nobody could send for this long is dropped (``suppressed``) rather than sent late."""


@dataclass
class Claimed:
    """An outbox row claimed for one delivery round (its lease is held until :data:`CLAIM_LEASE_SECS`)."""

    id: int
    kind: str
    payload: dict[str, Any]
    created_at: datetime
    attempts: int
    """Rounds including this one."""
    owner_email: str | None = None
    channels: dict[str, str] = field(default_factory=dict)
    """Channel → ``sent`` | ``gave_up`` from earlier rounds."""
    errors: dict[str, str] = field(default_factory=dict)
    """Channel → why it was given up."""


def _payload(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            loaded = json.loads(value)
            if isinstance(loaded, dict):
                return loaded
    return {}


def _example_ids(kind: str, payload: dict[str, Any]) -> list[str]:
    if kind == "pipeline_failed":
        return [str(payload["pipeline_id"])] if payload.get("pipeline_id") else []
    if kind == "admin_action":
        return [str(i) for i in (payload.get("job_ids") or [])[:1]]
    return [str(payload["job_id"])] if payload.get("job_id") else []


def _sample(payload: dict[str, Any]) -> dict[str, Any]:
    """What a summary keeps of the alert that opened its window (errors cut to 1,000 characters)."""
    sample = {k: v for k, v in payload.items() if not k.startswith("_") and k != "grouped_into"}
    if isinstance(sample.get("error"), str):
        sample["error"] = sample["error"][:1000]
    if isinstance(sample.get("step"), dict) and isinstance(sample["step"].get("error"), str):
        sample["step"] = {**sample["step"], "error": sample["step"]["error"][:1000]}
    return sample


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _base_fingerprint(row: RowMapping) -> str:
    """The fingerprint a row is grouped by: a summary's own is ``summary:`` + that of its alerts."""
    fingerprint = str(row["fingerprint"])
    return fingerprint.removeprefix("summary:") if row["kind"] == "summary" else fingerprint


def _user_id(payload: dict[str, Any]) -> int | None:
    sample = payload.get("sample")
    uid = payload.get("user_id") or (sample.get("user_id") if isinstance(sample, dict) else None)
    return uid if isinstance(uid, int) else None


Window = tuple[int, dict[str, Any]]
"""An open grouping window: the summary row's id and its payload (counts, examples, sample)."""


class _Grouping:
    """The decisions of one claiming transaction, made row by row and written by :meth:`write`.

    The caller holds the advisory lock of every fingerprint involved, so the open windows read here
    stay valid until it commits."""

    def __init__(self, conn: AsyncConnection, settings: Settings, now: datetime) -> None:
        self.conn = conn
        self.window = float(settings.alert_throttle_secs)
        self.enabled = set(settings.alert_on)
        self.now = now
        self.windows: dict[str, Window | None] = {}
        self.changed: set[int] = set()
        self.grouped: dict[int, list[int]] = {}
        self.suppressed: dict[str, list[int]] = {}
        self.deleted: list[int] = []
        self.send_now: list[RowMapping] = []

    async def decide(self, row: RowMapping) -> None:
        """Send ``row`` now, suppress it, delete it (an empty summary) or count it on its open window."""
        payload = _payload(row["payload"])
        kind = str(row["kind"])
        of_kind = str(payload.get("of_kind") or "failed") if kind == "summary" else kind
        if of_kind not in self.enabled:
            self._suppress(f"not sent: ALERT_ON does not include {of_kind}", row)
        elif row["attempts"] > 0:  # a retry round (or a lease that ran out): keep going
            self.send_now.append(row)
        elif kind == "summary":
            await self._window_over(row, payload, of_kind)
        elif (self.now - row["created_at"]).total_seconds() > STALE_AFTER_SECS:
            self._suppress(f"not sent: no channel took it within {STALE_AFTER_SECS / 3600:g} h", row)
        elif self.window <= 0:
            self.send_now.append(row)
        else:
            await self._group(row, kind, payload)

    def _suppress(self, reason: str, row: RowMapping) -> None:
        self.suppressed.setdefault(reason, []).append(row["id"])

    async def _window_over(self, row: RowMapping, payload: dict[str, Any], of_kind: str) -> None:
        if not payload.get("count"):
            self.deleted.append(row["id"])
            return
        self.send_now.append(row)
        fp = _base_fingerprint(row)
        if self.window > 0 and await self._current_window(fp) is None:  # repeats go on being grouped
            await self._open_window(fp, of_kind, row["id"], payload.get("sample") or {})

    async def _group(self, row: RowMapping, kind: str, payload: dict[str, Any]) -> None:
        fp = _base_fingerprint(row)
        current = await self._current_window(fp)
        if current is None:  # the first of its kind: send it and open a window
            self.send_now.append(row)
            await self._open_window(fp, kind, row["id"], _sample(payload))
            return
        sid, summary = current
        summary["count"] = int(summary.get("count") or 0) + 1
        summary["jobs"] = int(summary.get("jobs") or 0) + (
            int(payload.get("count") or 0) if kind == "admin_action" else 1
        )
        summary["examples"] = (list(summary.get("examples") or []) + _example_ids(kind, payload))[-5:]
        at = _iso(row["created_at"])
        summary["first_at"] = min(summary.get("first_at") or at, at)
        summary["last_at"] = max(summary.get("last_at") or at, at)
        self.changed.add(sid)
        self.grouped.setdefault(sid, []).append(row["id"])

    async def _current_window(self, fp: str) -> Window | None:
        if fp not in self.windows:
            found = (await self.conn.execute(OPEN_WINDOW, {"fp": f"summary:{fp}"})).mappings().first()
            self.windows[fp] = (found["id"], _payload(found["payload"])) if found else None
        return self.windows[fp]

    async def _open_window(self, fp: str, lead_kind: str, lead_id: int, sample: dict[str, Any]) -> None:
        payload = {
            "of_kind": lead_kind,
            "of_fingerprint": fp,
            "lead_id": lead_id,
            "window_secs": self.window,
            "count": 0,
            "jobs": 0,
            "examples": [],
            "first_at": None,
            "last_at": None,
            "sample": sample,
        }
        params = {"fp": f"summary:{fp}", "payload": json_text(payload), "secs": self.window}
        sid = (await self.conn.execute(INSERT_WINDOW, params)).scalar_one()
        self.windows[fp] = (sid, payload)

    async def write(self) -> None:
        """Store the decisions: suppressed and deleted rows, grouped rows and their windows' counts."""
        for reason, ids in self.suppressed.items():
            await self.conn.execute(SUPPRESS, {"reason": reason, "ids": ids})
        if self.deleted:
            await self.conn.execute(DELETE_ROWS, {"ids": self.deleted})
        for sid, ids in self.grouped.items():
            await self.conn.execute(GROUP_INTO, {"sid": sid, "ids": ids})
        for current in self.windows.values():
            if current is not None and current[0] in self.changed:
                await self.conn.execute(SET_PAYLOAD, {"id": current[0], "payload": json_text(current[1])})


async def _lease(conn: AsyncConnection, rows: Sequence[RowMapping]) -> list[Claimed]:
    result = await conn.execute(LEASE, {"ids": [r["id"] for r in rows], "lease": CLAIM_LEASE_SECS})
    leased: dict[int, int] = {alert_id: attempts for alert_id, attempts in result.all()}
    claimed = []
    for r in rows:
        payload = _payload(r["payload"])
        # a summary counted only rows decided before its window closed: the count is final here
        claimed.append(
            Claimed(
                id=r["id"],
                kind=str(r["kind"]),
                payload=payload,
                created_at=r["created_at"],
                attempts=leased[r["id"]],
                channels=dict(payload.get("_channels") or {}),
                errors=dict(payload.get("_errors") or {}),
            )
        )
    return claimed


async def _add_owners(conn: AsyncConnection, claimed: Sequence[Claimed]) -> None:
    """Fill in ``owner_email`` from the user id of each alert (or of a summary's sample)."""
    user_ids = {uid for c in claimed if (uid := _user_id(c.payload)) is not None}
    if not user_ids:
        return
    result = await conn.execute(OWNERS, {"ids": sorted(user_ids)})
    emails: dict[int, str] = {user_id: email for user_id, email in result.all()}
    for c in claimed:
        uid = _user_id(c.payload)
        c.owner_email = emails.get(uid) if uid is not None else None


async def claim(
    conn: AsyncConnection, settings: Settings, *, limit: int = CLAIM_BATCH
) -> tuple[list[Claimed], int]:
    """One claiming transaction's work: look at up to ``limit`` due rows, suppress kinds not in
    ``ALERT_ON`` and stale rows, group repeats into the open window of their fingerprint, delete empty
    windows, and lease at most :data:`DELIVER_PER_ROUND` rows to send now. Returns ``(to send, rows
    handled)``. The caller commits before sending anything."""
    rows = (await conn.execute(SELECT_DUE, {"limit": limit})).mappings().all()
    if not rows:
        return [], 0
    # in a fixed order, so two claims locking overlapping fingerprints cannot deadlock
    for fp in sorted({_base_fingerprint(r) for r in rows if r["attempts"] == 0}):
        await conn.execute(LOCK_FINGERPRINT, {"ns": ALERT_LOCK_NS, "fp": fp})
    grouping = _Grouping(conn, settings, (await conn.execute(NOW)).scalar_one())
    handled = 0
    for r in rows:
        if len(grouping.send_now) >= DELIVER_PER_ROUND:
            break
        handled += 1
        await grouping.decide(r)
    await grouping.write()
    if not grouping.send_now:
        return [], handled
    claimed = await _lease(conn, grouping.send_now)
    await _add_owners(conn, claimed)
    return claimed, handled
