"""An admin who comes too late to an approval step is told who decided it and when — on the page (the
person's time zone, as the pages show times) and in the API (ISO 8601) — from the job's events, in the
words of one function (:func:`app.jobs.decisions.decision_words`).

Through real processes: ``jobdesk serve`` and a ``worker.py`` subprocess that runs the steps.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

import asyncpg
import httpx
import pytest
from webkit import add_token, add_user, csrf_from, login, running_server
from workers import WorkerProcess, wait_status

from app.formatting import format_localtime
from app.jobs import queue
from app.jobs.decisions import Decision, decision_words
from app.jobs.queue import NewJob
from app.settings import Settings

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00"


def test_one_function_words_a_decision_for_the_api_and_for_a_page() -> None:
    at = datetime(2026, 11, 29, 19, 25, 4, tzinfo=UTC)
    decided = Decision("approved", "ann@example.com", at)
    assert decision_words(decided) == "already approved by ann@example.com at 2026-11-29T19:25:04+00:00"
    assert (
        decision_words(decided, "Europe/Berlin")
        == "already approved by ann@example.com at 29 Nov 2026, 20:25 CET"
    )
    assert decision_words(Decision("rerun_requested", "user 7", at), "UTC").startswith(
        "already sent back to run again by user 7 at 29 Nov 2026, 19:25 UTC"
    )


@pytest.fixture
async def live(db_url: str, settings: Settings, tmp_path: Path) -> AsyncIterator[str]:
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    try:
        with running_server(db_url, tmp_path / "serve") as base:
            yield base
    finally:
        worker.close()


async def _waiting_step(engine: Any, settings: Settings, pg: asyncpg.Connection, owner: int) -> uuid.UUID:
    """A step that ran on the worker and now waits for approval."""
    async with engine.begin() as conn:
        new = NewJob(type="noop", input_data={"n": 1}, user_id=owner, requires_approval=True)
        job = (await queue.enqueue(conn, new, settings)).job
    await wait_status(pg, job["id"], {"waiting_approval"})
    return uuid.UUID(str(job["id"]))


async def test_the_second_admin_is_told_who_decided_and_when_on_the_api_and_on_the_page(
    live: str, db_url: str, engine: Any, settings: Settings, pg: asyncpg.Connection
) -> None:
    ann = await add_user(db_url, "ann@example.com", admin=True)
    bob = await add_user(db_url, "bob@example.com", admin=True)
    await pg.execute("UPDATE users SET timezone = 'America/New_York' WHERE id = $1", bob.id)
    as_ann = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    as_bob = {"Authorization": f"Bearer {await add_token(db_url, bob.id)}"}
    first, second = [await _waiting_step(engine, settings, pg, ann.id) for _ in range(2)]

    async with httpx.AsyncClient(base_url=live, timeout=20) as api:
        # the API: two admins approve the same step; then a reject after the approval
        assert (await api.post(f"/api/jobs/{first}/approve", headers=as_ann)).status_code == 200
        approved_at = await pg.fetchval(
            "SELECT at FROM job_events WHERE job_id = $1 AND kind = 'approved'", first
        )
        iso = approved_at.astimezone(UTC).isoformat(timespec="seconds")
        for action, body in (("approve", None), ("reject", {"reason": "wrong numbers"})):
            r = await api.post(f"/api/jobs/{first}/{action}", headers=as_bob, json=body)
            assert r.status_code == 409, r.text
            assert r.json()["detail"] == (
                f"Cannot {action} job {first}: it was already approved by ann@example.com at {iso}."
            )
            assert re.search(ISO, r.json()["detail"])
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", first) == "completed"

        # the same on the page, in the late admin's own time zone
        assert (await api.post(f"/api/jobs/{second}/approve", headers=as_ann)).status_code == 200
    approved_at = await pg.fetchval(
        "SELECT at FROM job_events WHERE job_id = $1 AND kind = 'approved'", second
    )
    shown = format_localtime(approved_at, ZoneInfo("America/New_York"))
    assert "EST" in shown or "EDT" in shown
    async with httpx.AsyncClient(base_url=live, timeout=20) as browser:
        r = await login(cast(Any, browser), "bob@example.com")
        assert r.status_code in (302, 303), r.text
        token = csrf_from((await browser.get(f"/jobs/{second}")).text)
        for action, extra in (("approve", {}), ("reject", {"reason": "wrong numbers"})):
            r = await browser.post(f"/jobs/{second}/{action}", data={"_csrf_token": token, **extra})
            assert r.status_code == 409, r.text[-2000:]
            assert f"Nothing changed: this step was already approved by ann@example.com at {shown}." in r.text
    assert (
        await pg.fetchval("SELECT count(*) FROM job_events WHERE job_id = $1 AND kind = 'rejected'", second)
        == 0
    )
