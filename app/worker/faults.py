"""How the worker meets failures: the text an exception leaves in ``error_message`` or a log line, and
retrying a database operation through an outage instead of dying of it."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db import is_transient
from app.errors import AppError
from app.processors import RetryableError
from app.silence import close_unless_answered, warn_on_close
from app.worker.cpu import ProcessFailure
from app.worker.held import HeldConnection

T = TypeVar("T")

RETRY_FIRST_DELAY_SECS = 0.2
RETRY_MAX_DELAY_SECS = 5.0


def describe(exc: BaseException) -> str:
    """``Type: message`` then the traceback, as stored in ``error_message`` (capped by the queue). A
    CPU-bound processor's failure carries its child's traceback; a :class:`RetryableError` is written
    for people and is stored as its message alone."""
    if isinstance(exc, ProcessFailure):
        return f"{exc}\n\n{exc.traceback_text}"
    if isinstance(exc, RetryableError) and str(exc):
        return str(exc)
    head = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    try:
        tb = "".join(traceback.format_exception(exc, limit=50))
    except RecursionError:
        tb = ""
    return f"{head}\n\n{tb}" if tb else head


def next_jobs_refused(exc: BaseException) -> str:
    """The stored error of a job whose next jobs were refused, whether the plan was refused before the
    outcome was written or the queue refused them while writing it: the refusal's words (the field and
    why), without a traceback, which would say where the check is and not what the processor asked for
    (the executor logs it when the refusal is not one of the app's own)."""
    if isinstance(exc, AppError):
        why = str(exc)
    else:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"could not create the next jobs: {why}"


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters), for log lines."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


async def retrying(
    db: AsyncEngine | HeldConnection,
    what: str,
    fn: Callable[[AsyncConnection], Awaitable[T]],
    log: Any,
    *,
    answer_secs: float | None = None,
) -> T:
    """Run ``fn(conn)`` in a transaction on ``db`` (an engine), or on a held autocommit connection,
    retrying transient errors with backoff until it succeeds: an outage of the database delays the
    worker's bookkeeping but never loses it. An attempt without its answer (commit included) after
    ``answer_secs`` has its connection closed (:func:`app.silence.close_unless_answered`) and is tried
    again on a fresh one: on a connection gone silent it would otherwise wait for ever."""
    delay = RETRY_FIRST_DELAY_SECS
    while True:
        watch: asyncio.TimerHandle | None = None
        try:
            async with db.use() if isinstance(db, HeldConnection) else db.begin() as conn:
                if answer_secs is not None:
                    watch = close_unless_answered(conn, answer_secs, warn_on_close(log, what, answer_secs))
                return await fn(conn)
        except Exception as exc:
            if not is_transient(exc):
                raise
            log.warning(
                "database unavailable; retrying", operation=what, error=first_line(exc), retry_in_secs=delay
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY_SECS)
        finally:
            if watch is not None:
                watch.cancel()
