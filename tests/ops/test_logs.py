"""Log output: JSON lines with the request's context, level filtering (app.logs)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from app import logs
from app.logs import configure_logging
from app.settings import load_settings


@pytest.fixture
def reset_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_json_lines_carry_bound_context(reset_logging: None) -> None:
    buf = io.StringIO()
    configure_logging(load_settings(log_level="INFO"), stream=buf, json=True)
    log = structlog.get_logger("jobdesk.test")
    structlog.contextvars.bind_contextvars(request_id="r-1", job_id="j-9")
    log.info("hello", n=1)
    log.debug("dropped at INFO")
    logging.getLogger("uvicorn.error").warning("from the standard library")
    first, second = _lines(buf)
    assert first["event"] == "hello"
    assert first["n"] == 1
    assert first["level"] == "info"
    assert first["request_id"] == "r-1"
    assert first["job_id"] == "j-9"
    assert first["logger"] == "jobdesk.test"
    assert first["timestamp"].endswith("Z")
    assert second["event"] == "from the standard library"
    assert second["logger"] == "uvicorn.error"
    assert second["level"] == "warning"
    assert second["request_id"] == "r-1"


def test_exceptions_are_rendered_in_the_json_line(reset_logging: None) -> None:
    buf = io.StringIO()
    configure_logging(load_settings(log_level="INFO"), stream=buf, json=True)
    try:
        raise ValueError("bad thing")
    except ValueError:
        structlog.get_logger("jobdesk.test2").exception("failed")
    (line,) = _lines(buf)
    assert line["event"] == "failed"
    assert "ValueError: bad thing" in line["exception"]


def test_worker_log_level_applies_to_worker_loggers_only(reset_logging: None) -> None:
    buf = io.StringIO()
    configure_logging(load_settings(log_level="INFO", job_worker_log_level="DEBUG"), stream=buf, json=True)
    structlog.get_logger("jobdesk.worker.loop").debug("poll")
    structlog.get_logger("jobdesk.web.x").debug("not shown")
    structlog.get_logger("jobdesk.web.x").info("shown")
    assert [line["event"] for line in _lines(buf)] == ["poll", "shown"]


def test_console_renderer_on_a_terminal(reset_logging: None) -> None:
    buf = io.StringIO()
    configure_logging(load_settings(log_level="WARNING"), stream=buf, json=False)
    structlog.get_logger("jobdesk.test3").warning("careful", x=2)
    out = buf.getvalue()
    assert "careful" in out
    assert "x=2" in out
    assert not out.startswith("{")


def test_lines_reach_the_file_by_the_end_of_the_loop_turn_that_wrote_them(
    reset_logging: None, tmp_path: Path
) -> None:
    """Lines written in one turn of an event loop share one flush at its end; outside a loop each line is
    flushed at once; and a loop that closed before its flush ran does not keep later lines back."""
    path = tmp_path / "worker.log"
    with path.open("w") as out:  # block-buffered, as standard output is when it is a file or a pipe
        configure_logging(load_settings(log_level="INFO"), stream=out, json=True)
        log = structlog.get_logger("jobdesk.worker")

        async def two_lines() -> None:
            log.info("one")
            log.info("two")
            await asyncio.sleep(0)  # the end of the turn

        asyncio.run(two_lines())
        assert [line["event"] for line in _file_lines(path)] == ["one", "two"]

        log.info("outside a loop")
        assert _file_lines(path)[-1]["event"] == "outside a loop"

        # A line written by the last callback a loop ran before it stopped and closed: its flush never runs.
        loop = asyncio.new_event_loop()

        def last_callback() -> None:
            log.info("three")
            loop.stop()

        loop.call_soon(last_callback)
        loop.run_forever()
        loop.close()

        async def later_line() -> None:
            log.info("four")
            await asyncio.sleep(0)

        asyncio.run(later_line())
        assert [line["event"] for line in _file_lines(path)][-2:] == ["three", "four"]


def _file_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class _Raw(io.RawIOBase):
    """An unbuffered byte sink that counts its writes: each one is a system call on a real file."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.writes.append(bytes(data))
        return len(data)


def test_a_turn_of_the_loop_hands_its_lines_over_in_one_write_on_an_unbuffered_stream(
    reset_logging: None,
) -> None:
    """Standard output as ``PYTHONUNBUFFERED`` (which container images set) makes it: every ``write``
    reaches the file. The lines of one turn (structlog's and the standard library's, in the order written)
    still go out in one write, and a line written outside a loop at once."""
    raw = _Raw()
    out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # type: ignore[type-var]
    configure_logging(load_settings(log_level="INFO"), stream=out, json=True)
    log = structlog.get_logger("jobdesk.worker")

    async def one_turn() -> None:
        for i in range(10):
            log.info("job started", n=i)
            if i == 4:
                logging.getLogger("uvicorn.error").warning("from the standard library")
        await asyncio.sleep(0)

    asyncio.run(one_turn())
    assert len(raw.writes) == 1, raw.writes
    events = [json.loads(line)["event"] for line in raw.writes[0].decode().splitlines()]
    assert events == ["job started"] * 5 + ["from the standard library"] + ["job started"] * 5

    log.info("outside a loop")
    assert len(raw.writes) == 2 and b"outside a loop" in raw.writes[1]

    async def many_lines() -> None:
        # A turn that writes many lines does not keep them all back: they go out in parts, in order.
        for i in range(2 * logs.PENDING_MAX_LINES + 1):
            log.info("line", n=i)
        assert len(raw.writes) == 4

    asyncio.run(many_lines())
    assert len(raw.writes) == 5
    assert [line["n"] for line in _raw_lines(raw) if line["event"] == "line"] == list(
        range(2 * logs.PENDING_MAX_LINES + 1)
    )

    async def blocked_turn() -> None:
        # A turn that does not end (a processor blocking the loop): a line from another thread (the
        # watchdog reporting the stall) brings the loop's waiting lines out first, in order.
        log.info("last line before the block")
        other = threading.Thread(target=lambda: log.warning("event loop blocked"))
        other.start()
        other.join()
        assert [line["event"] for line in _raw_lines(raw)[-2:]] == [
            "last line before the block",
            "event loop blocked",
        ]

    asyncio.run(blocked_turn())


def test_lines_of_later_turns_skip_asking_for_the_running_loop(
    reset_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asking for the running loop is a getpid system call on Python 3.11: the thread that wrote last
    asks once per loop, not once per line, and its lines still go out at the end of each turn."""
    raw = _Raw()
    out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # type: ignore[type-var]
    configure_logging(load_settings(log_level="INFO"), stream=out, json=True)
    log = structlog.get_logger("jobdesk.worker")
    asked = []
    real = logs._events._get_running_loop

    def counted() -> asyncio.AbstractEventLoop | None:
        if sys._getframe(1).f_code is logs._write.__code__:  # asyncio's own calls are not counted
            asked.append(1)
        return real()

    monkeypatch.setattr(logs._events, "_get_running_loop", counted)

    async def turns() -> None:
        for i in range(5):
            log.info("job started", n=i)
            log.info("job finished", n=i)
            await asyncio.sleep(0)
            assert len(raw.writes) == i + 1

    asyncio.run(turns())
    assert len(asked) == 1
    log.info("outside a loop")  # the loop stopped: asked again, and written at once
    assert len(asked) == 2 and b"outside a loop" in raw.writes[-1]


def _raw_lines(raw: _Raw) -> list[dict]:
    return [json.loads(line) for line in b"".join(raw.writes).decode().splitlines()]


class _SlowRaw(_Raw):
    """A byte sink whose writes take a while, as a pipe's do when its reader is slow."""

    def write(self, data: bytes) -> int:  # type: ignore[override]
        time.sleep(0.01)
        return super().write(data)


def test_an_exit_from_another_thread_keeps_every_other_threads_lines_back(
    reset_logging: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop watch ends ``jobdesk worker`` from its own thread (``_exit_now``) while a processor may be
    logging in the loop's thread: the lines waiting are handed over, and from then on no other thread
    begins a hand-over, so the process cannot end in the middle of one (half a line) or with another
    thread's lines after the exit's. Another thread began writing in the moment before ``os._exit``."""
    from app.worker import main

    raw = _SlowRaw()
    out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)  # type: ignore[type-var]
    configure_logging(load_settings(log_level="INFO"), stream=out, json=True)
    log = structlog.get_logger("jobdesk.worker")
    stop = threading.Event()

    def chatter() -> None:  # a processor logging in a loop, outside the stuck loop's turns
        while not stop.is_set():
            log.info("chatter")

    writes_during_exit: list[int] = []
    written: list[str] = []

    def os_exit(code: int) -> None:  # the process would end here: give the other thread the time to write
        before = len(raw.writes)
        time.sleep(0.2)
        writes_during_exit.append(len(raw.writes) - before)
        written.extend(json.loads(line)["event"] for w in raw.writes for line in w.decode().splitlines())

    monkeypatch.setattr(logging, "shutdown", lambda: None)  # the test process's handlers stay open
    monkeypatch.setattr(main.os, "_exit", os_exit)
    other = threading.Thread(target=chatter, daemon=True)
    other.start()
    try:
        while len(raw.writes) < 3:
            time.sleep(0.01)

        async def stuck_turn() -> None:
            log.error("the event loop did not stop in time")  # waits for the end of the turn
            main._exit_now(3)

        asyncio.run(stuck_turn())
    finally:
        with contextlib.suppress(RuntimeError):  # not held: the exit let go of the streams
            logs._PENDING_LOCK.release()
        stop.set()
        other.join(5)
    assert writes_during_exit == [0]
    # Out before the exit: handed over by the exit, or pushed out first by the other thread's last line.
    assert "the event loop did not stop in time" in written
