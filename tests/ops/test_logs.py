"""Log output: JSON lines with the request's context, level filtering (app.logs)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

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
