"""A job's log lines are written on the worker's pooled connections, and a job's end waits for its lines to
be written (so that the page showing its outcome shows every line). On a connection gone silent (a proxy
or pooler in between keeps the TCP connection alive, so no keepalive notices) that write must be given
up within a bound, never hold the job's outcome: a log must never hold a job up."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from structlog.testing import capture_logs

from app.db import is_transient
from app.worker.runner import Worker
from tests.support.netproxy import BlackholeProxy

pytestmark = pytest.mark.slow


@pytest.fixture
async def blackhole(db_url: str) -> AsyncIterator[tuple[BlackholeProxy, str]]:
    url = make_url(db_url)
    proxy = BlackholeProxy(url.port or 5432)
    await proxy.start()
    try:
        yield proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    finally:
        proxy.sever()
        await proxy.close()


async def test_a_jobs_log_lines_on_a_connection_gone_silent_do_not_hold_its_end(
    make_settings, blackhole
) -> None:
    """The worker's pooled connection goes silent (a proxy keeps the TCP connection alive, so no keepalive
    notices) and a job that logged a line ends: its end writes the lines first. That write waited for
    its answer for ever, and the job's end with it: its outcome never reached the completer, while the
    lease keeper, on a fresh connection, kept the job ``in_progress`` (and every later job's lines queued
    behind it). Bounded by a heartbeat, the write is given up, its connection closed (the lines are
    lost, which is logged): the job's end goes on."""
    proxy, proxied = blackhole
    settings = make_settings(database_url=proxied, worker_visibility_timeout_secs=3)
    worker = Worker(settings, proxied)
    try:
        async with worker.engine.connect() as conn:  # the pool's connection, idle from now on
            await conn.execute(text("SELECT 1"))
        proxy.frozen = True
        writer = worker.executor.joblog
        assert writer is not None
        lines = writer.buffer(uuid.uuid4(), 1)
        lines.add("info", "a line for the job's page")
        started = time.monotonic()
        with capture_logs() as logs:
            await asyncio.wait_for(writer.flush(lines.job_id), 10)
        took = time.monotonic() - started
    finally:
        proxy.sever()
        await worker.engine.dispose(close=False)
        await worker.app_engine.dispose(close=False)
    assert took < 3, took
    assert [e["event"] for e in logs if e["event"] == "could not write job log lines"]


async def _frozen_after_one_use(engine: Any, proxy: BlackholeProxy) -> None:
    async with engine.connect() as conn:  # the pool's connection, idle from now on
        await conn.execute(text("SELECT 1"))
    proxy.frozen = True


async def test_the_workers_side_tasks_on_a_connection_gone_silent_give_it_up_within_a_heartbeat(
    make_settings, blackhole
) -> None:
    """The worker's durable cancel checks, its alert delivery and its notice mailer each run a
    transaction on a pooled connection. Gone silent (a proxy keeps the TCP connection alive, so no
    keepalive notices), each waited for its answer for ever: cancel requests were no longer looked for
    between renewals, no alert was delivered nor notice e-mailed by this worker again. Bounded by a
    heartbeat, each fails as a lost connection, which its loop waits out on a fresh one."""
    from app.alerts import Deliverer
    from app.notifications import Mailer

    proxy, proxied = blackhole
    settings = make_settings(database_url=proxied, worker_visibility_timeout_secs=3)
    worker = Worker(settings, proxied)
    # a job whose cancel is looked for, fenced by its claim
    worker.running[uuid.uuid4()] = SimpleNamespace(row={"claims": 1})  # type: ignore[assignment]
    try:
        await _frozen_after_one_use(worker.engine, proxy)
        for name, step in [
            ("checks", lambda: worker.checks.check_cancels()),
            ("alerts", lambda: Deliverer(worker.engine, settings).run_once()),
            ("notices", lambda: Mailer(worker.engine, settings).run_once()),
        ]:
            started = time.monotonic()
            with pytest.raises(Exception) as raised:
                await asyncio.wait_for(step(), 10)
            took = time.monotonic() - started
            assert is_transient(raised.value), (name, raised.value)
            assert took < 3, (name, took)
            proxy.sever()
            proxy.frozen = False
            await _frozen_after_one_use(worker.engine, proxy)
    finally:
        proxy.sever()
        await worker.engine.dispose(close=False)
        await worker.app_engine.dispose(close=False)


async def test_callbacks_on_a_connection_gone_silent_through_the_sweeps_parts_are_an_outage_waited_out(
    make_settings, blackhole
) -> None:
    """The callback sender runs as a part of the sweep without a bound of its own (its sends wait on
    receivers); its transaction's own bound closing a silent connection is a lost connection its loop
    waits out, as before parts had bounds, not an error that ends the loop."""
    proxy, proxied = blackhole
    settings = make_settings(
        database_url=proxied, callback_signing_secret="s", worker_visibility_timeout_secs=3
    )
    worker = Worker(settings, proxied)
    sender = worker.maintenance.callbacks
    try:
        await _frozen_after_one_use(worker.engine, proxy)
        with pytest.raises(Exception) as raised:
            await asyncio.wait_for(worker.maintenance.parts.run("callbacks", sender.run_once), 10)
        assert is_transient(raised.value), repr(raised.value)
        assert "callbacks" not in worker.maintenance.parts.failing
    finally:
        proxy.sever()
        await worker.engine.dispose(close=False)
        await worker.app_engine.dispose(close=False)
