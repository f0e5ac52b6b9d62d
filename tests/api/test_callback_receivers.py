"""A callback receiver cannot hold the worker's delivery: one that answers with an endless body, or
drips its answer a byte at a time, is done with within the send's time limit, and the other callbacks
of the same round are delivered meanwhile. httpx's own timeout bounds each read, not the exchange, and
``post`` reads the whole body; both would let one receiver (anyone who may submit a job picks the URL)
stall every owner's callbacks and fill the worker's memory."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from app import callbacks
from app.callbacks import CallbackSender
from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from tests.support.factories import TestUser

DRIP_FOR_SECS = 6.0
"""How long a dripping receiver keeps its connection busy when nobody hangs up on it."""


class _Dripper(socketserver.BaseRequestHandler):
    """Reads the POST, then answers by the path: ``/body`` a 200 whose body drips without end,
    ``/head`` a status line and headers that drip without end, anything else 204 at once."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            ),
            0,
        )
        while len(rest) < length:
            rest += sock.recv(65536)
        path = head.split(b" ")[1]
        if path == b"/ok":
            sock.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
            return
        if path == b"/body":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n")
            drip = b"x"
        else:
            sock.sendall(b"HTTP/1.1 200 OK\r\nX-Pad: ")
            drip = b"y"
        end = time.monotonic() + DRIP_FOR_SECS
        try:
            while time.monotonic() < end:
                sock.sendall(drip)
                time.sleep(0.1)
        except OSError:
            return  # the sender hung up: what the test wants


@pytest.fixture
def dripper() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Dripper)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _Log:
    def info(self, *a: Any, **k: Any) -> None:
        pass

    warning = info


async def _finished_job_with_callback(engine: Any, settings: Settings, owner: TestUser, url: str) -> Any:
    async with engine.begin() as conn:
        job = (await queue.enqueue(conn, NewJob(type="noop", input_data={}, user_id=owner.id), settings)).job
        await callbacks.add(conn, job["id"], url)
    return job["id"]


async def test_a_dripping_or_endless_receiver_does_not_hold_the_round(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection, dripper: str, monkeypatch: Any
) -> None:
    monkeypatch.setattr(callbacks, "SEND_TIMEOUT_SECS", 1.0)
    settings = make_settings(
        worker_enabled=False, callback_signing_secret="s", http_request_allowed_hosts=["127.0.0.1"]
    )
    endless = await _finished_job_with_callback(engine, settings, owner, f"{dripper}/body")
    slow_head = await _finished_job_with_callback(engine, settings, owner, f"{dripper}/head")
    fine = await _finished_job_with_callback(engine, settings, owner, f"{dripper}/ok")
    await pg.execute("UPDATE jobs SET status = 'completed', completed_at = now()")

    started = time.monotonic()
    assert await CallbackSender(engine, settings, log=_Log()).run_once() == 3
    took = time.monotonic() - started
    assert took < 4.0, f"one round of callbacks took {took:.1f} s with a send limit of 1 s"

    rows = {
        r["job_id"]: r
        for r in await pg.fetch("SELECT job_id, delivered_at, given_up_at, last_error FROM job_callbacks")
    }
    assert rows[fine]["delivered_at"] is not None
    # only the status decides: a 2xx with a body nobody reads is delivered
    assert rows[endless]["delivered_at"] is not None, rows[endless]
    # no complete answer in time: tried again later, saying so
    assert rows[slow_head]["delivered_at"] is None and rows[slow_head]["given_up_at"] is None
    assert "within 1 second" in rows[slow_head]["last_error"], rows[slow_head]["last_error"]
