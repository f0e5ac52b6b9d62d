"""``jobdesk serve --workers 2``: two web processes on one port, one in-app worker between them.

Each request goes over a new connection (no keep-alive), so the kernel hands them to either process;
``X-Process-ID`` on every answer says which one served it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from app.db import asyncpg_dsn
from tests.support.webkit import add_user, csrf_from, running_server
from tests.support.workers import wait_until

PASSWORD = "correct horse battery"


def _client(base: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=base, limits=httpx.Limits(max_keepalive_connections=0), follow_redirects=False, timeout=20
    )


async def _pids_seen(base: str, want: int, timeout: float = 30) -> set[str]:
    """Process ids that answered concurrent ``/healthz`` requests, until ``want`` distinct ones did."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    async with _client(base) as c:
        while len(seen) < want and time.monotonic() < deadline:
            answers = await asyncio.gather(*(c.get("/healthz") for _ in range(8)), return_exceptions=True)
            seen |= {r.headers["x-process-id"] for r in answers if isinstance(r, httpx.Response)}
            await asyncio.sleep(0.1)
    return seen


async def _live_workers(pg: asyncpg.Connection) -> list[dict[str, Any]]:
    rows = await pg.fetch(
        "SELECT id, pid FROM workers WHERE last_seen_at > now() - interval '5 seconds' AND NOT stopping"
    )
    return [dict(r) for r in rows]


async def test_two_web_processes_share_sessions_csrf_and_one_in_app_worker(
    db_url: str, tmp_path: Path
) -> None:
    """Pages, sign-in and form posts work whichever process answers (sessions live in the database, the
    CSRF key is shared through the data directory: SECRET_KEY is unset here), and the host runs one
    in-app worker; when the process running it dies, the other process takes it over."""
    await add_user(db_url, "root@example.com", admin=True)
    env = {
        "WEB_CONCURRENCY": "2",
        "WORKER_ENABLED": "true",
        "SECRET_KEY": "",
        "WORKER_HEARTBEAT_SECS": "1",
        "JOB_PROCESSOR_POLL_INTERVAL": "0.2",
    }
    data_dir = tmp_path / "data"
    pg = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        # several processes importing the app at once on a busy machine start slowly
        with running_server(db_url, data_dir, start_timeout=90, **env) as base:
            assert len(await _pids_seen(base, 2)) == 2, "requests never reached a second web process"

            pids: set[str] = set()
            async with _client(base) as c:
                for _ in range(4):  # sign in, open a form and post it, several times over fresh connections
                    c.cookies.clear()
                    page = await c.get("/login")
                    r = await c.post(
                        "/login",
                        data={
                            "email": "root@example.com",
                            "password": PASSWORD,
                            "next": "/",
                            "_csrf_token": csrf_from(page.text),
                        },
                    )
                    assert r.status_code == 303, r.text
                    form = await c.get("/jobs/new/noop")
                    assert form.status_code == 200
                    r = await c.post("/jobs/new/noop", data={"_csrf_token": csrf_from(form.text)})
                    assert r.status_code == 303, r.text
                    job_page = await c.get(r.headers["location"])
                    assert job_page.status_code == 200
                    pids |= {x.headers["x-process-id"] for x in (page, r, form, job_page)}
            assert len(pids) == 2, f"the sign-in and form posts were all served by one process: {pids}"

            await wait_until(
                lambda: pg.fetchval("SELECT count(*) = 4 FROM jobs WHERE status = 'completed'"),
                timeout=30,
                what="the in-app worker runs the four jobs",
            )
            (worker,) = await _live_workers(pg)
            assert str(worker["pid"]) in pids
            holder = int((data_dir / f"in-app-worker.{os.uname().nodename}.lock").read_text())
            assert holder == worker["pid"]

            # the holder dies without any cleanup: another web process (the other one, or the one uvicorn
            # starts in its place) takes the worker over
            os.kill(holder, signal.SIGKILL)

            async def taken_over() -> bool:
                live = await _live_workers(pg)
                return len(live) == 1 and live[0]["pid"] != holder

            await wait_until(taken_over, timeout=20, what="the other web process runs the in-app worker")
            assert len(await _live_workers(pg)) == 1
    finally:
        await pg.close()
