"""The sweep: periodic duties of every worker that are not about its own jobs, each a small service with
``async run_once()``, driven by one loop (:class:`Maintenance`, the worker's ``sweep`` side task).

* :class:`ExpiredLeaseRescue` — every ``WORKER_SWEEP_INTERVAL_SECS``: jobs whose lease expired (their
  worker died or lost the database) go back to the queue, or fail when no attempts remain. One process
  sweeps at a time (an advisory lock in :func:`app.jobs.queue.rescue_expired`).
* :class:`ScheduleFiring` — every sweep: due schedules fire (:func:`app.controls.fire_due`).
* :class:`ApprovalTimeouts` — every sweep: steps that waited ``approval_timeout`` without a decision are
  rejected or their approvers reminded (:func:`app.jobs.queue.expire_approvals`).
* :class:`Retention` — every minute: finished jobs past ``JOB_RETENTION_DAYS`` are deleted, with their
  files, in small batches; every hour, bytes in the files folder that no row names and are as old, and
  scratch directories a dead process left (:mod:`app.worker.scratch`).
* :class:`Upkeep` — every minute: old worker rows, expired sessions and old sign-in attempts are deleted.

Alerts past retention are deleted by the alert delivery task itself (:class:`app.alerts.Deliverer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app import controls, metrics
from app.callbacks import CallbackSender
from app.db import is_transient
from app.files import FileStore
from app.jobs import queue
from app.jobs.backoff import retry_delay
from app.processors import registry
from app.settings import Settings
from app.silence import answered_within, warn_on_close
from app.worker import scratch
from app.worker.completer import Tally
from app.worker.faults import first_line
from app.worker.sweep_parts import ABANDON_SECS, Parts

MAINTENANCE_INTERVAL_SECS = 60.0
"""How often retention and upkeep run (the rescue and schedules run every sweep)."""
RETENTION_BATCHES_PER_PASS = 20
"""At most this many batches of deletions per pass; the rest waits for the next pass, so a large backlog
never holds the sweep for long."""
UNRECORDED_SCAN_SECS = 3600.0
"""How often each worker lists the files folder for bytes no row names (the listing reads it whole)."""
UNRECORDED_MIN_AGE_SECS = 86400.0
"""Bytes without a row are left alone at least this long, whatever ``JOB_RETENTION_DAYS`` says: their row
may be in a transaction not committed yet (bytes are written before their row is inserted), and their
age is read from the writing host's clock (the id's time, the bytes' time), which may be off."""
UNRECORDED_CHECK_BATCH = 1000
SCRATCH_MIN_AGE_SECS = 3600.0
"""A scratch directory unchanged this long is checked against the attempts running now: a process that
died (killed, out of memory, the host restarted) never removed its own. Younger ones are not looked at,
whatever the database says (a directory is made just after its attempt is claimed)."""


def answered(
    block: contextlib.AbstractAsyncContextManager[AsyncConnection], seconds: float | None, log: Any, what: str
) -> contextlib.AbstractAsyncContextManager[AsyncConnection]:
    """``block`` (a connection or transaction of the sweep) given ``seconds`` to be over, its commit
    included, after which its connection is closed and the block fails as a lost connection
    (:func:`app.silence.answered_within`): the sweep logs it and goes on at its next pass, on a fresh
    connection."""
    return answered_within(block, seconds, warn_on_close(log, what, seconds))


class ExpiredLeaseRescue:
    """Jobs whose lease expired go back to ``queued`` (or ``failed``/``cancelled``, see
    :func:`app.jobs.queue.rescue_expired`). ``on_rescued`` is called when any were rescued."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        tally: Tally,
        log: Any,
        on_rescued: Callable[[], None],
        answer_secs: float | None = None,
    ) -> None:
        self.engine = engine
        self.answer_secs = answer_secs
        self.tally = tally
        self.log = log
        self.on_rescued = on_rescued

    async def run_once(self) -> list[RowMapping]:
        async with answered(self.engine.begin(), self.answer_secs, self.log, "rescue") as conn:
            rescued = await queue.rescue_expired(conn, delays=_delays())
        if rescued:
            metrics.RESCUED.inc(len(rescued))
            # jobs failed by the sweep (no attempts left) count in this worker's throughput sample,
            # which /admin's "failures in the last hour" reads
            self.tally.count_swept_failures(sum(1 for r in rescued if r["status"] == "failed"))
            self.log.warning(
                "rescued jobs whose lease expired",
                count=len(rescued),
                jobs={str(r["id"]): r["status"] for r in rescued[:20]},
            )
            self.on_rescued()
        return rescued


def _delays() -> dict[str, Any]:
    """Per-type backoff for rescued jobs, so a job that keeps killing its worker is not retried at once."""
    result: dict[str, Any] = {}
    for spec in registry.all():
        if spec.retry is not None:
            policy = spec.retry
            result[spec.type] = lambda attempt, p=policy: retry_delay(p, attempt)
    return result


class ScheduleFiring:
    """Due schedules create their job or pipeline; ``on_fired`` is called when any fired."""

    def __init__(
        self,
        engine: AsyncEngine,
        settings: Settings,
        *,
        log: Any,
        on_fired: Callable[[], None],
        answer_secs: float | None = None,
    ) -> None:
        self.engine = engine
        self.answer_secs = answer_secs
        self.settings = settings
        self.log = log
        self.on_fired = on_fired

    async def run_once(self) -> list[dict[str, Any]]:
        async with answered(self.engine.begin(), self.answer_secs, self.log, "schedules") as conn:
            fired = await controls.fire_due(conn, self.settings)
        if fired:
            self.log.info(
                "schedules fired", count=len(fired), schedules=sorted({f["schedule"] for f in fired})
            )
            self.on_fired()
        return fired


class ApprovalTimeouts:
    """Steps past their ``approval_timeout``: rejected (dependents cancelled) or reminded at growing
    intervals (:func:`app.jobs.queue.expire_approvals`), through the queue's compare-and-set with its event; ``on_rejected`` is called when any were
    rejected (their pipelines may have work to cancel or release)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        log: Any,
        on_rejected: Callable[[], None],
        answer_secs: float | None = None,
    ) -> None:
        self.engine = engine
        self.answer_secs = answer_secs
        self.log = log
        self.on_rejected = on_rejected

    async def run_once(self) -> dict[str, list[Any]]:
        async with answered(self.engine.begin(), self.answer_secs, self.log, "approvals") as conn:
            swept = await queue.expire_approvals(conn)
        if swept["rejected"] or swept["reminded"]:
            self.log.info(
                "approval timeouts",
                rejected=[str(i) for i in swept["rejected"][:20]],
                reminded=[str(i) for i in swept["reminded"][:20]],
            )
        if swept["rejected"]:
            self.on_rejected()
        return swept


class Retention:
    """Finished jobs and pipelines past ``JOB_RETENTION_DAYS`` are deleted (batches left empty with
    them), and their files removed; bytes no row names and scratch directories of attempts no longer
    running, too."""

    def __init__(
        self,
        engine: AsyncEngine,
        settings: Settings,
        *,
        files: FileStore,
        log: Any,
        answer_secs: float | None = None,
    ) -> None:
        self.engine = engine
        self.answer_secs = answer_secs
        self.settings = settings
        self.files = files
        self.log = log
        self.scanned_at: float | None = None
        """When the files folder was last looked through (monotonic); ``None``: not yet."""

    async def run_once(self) -> None:
        if self.scanned_at is None or time.monotonic() - self.scanned_at >= UNRECORDED_SCAN_SECS:
            self.scanned_at = time.monotonic()
            await self.remove_unrecorded()
            await self.remove_scratch_leftovers()
        for _ in range(RETENTION_BATCHES_PER_PASS):
            async with answered(self.engine.begin(), self.answer_secs, self.log, "retention") as conn:
                pruned = await queue.prune(conn, self.settings.job_retention_days)
            # Off the event loop: thousands of deletions a pass, on a slow or stalled file system (a
            # network mount), would stop lease renewals, claims and outcomes meanwhile.
            await asyncio.to_thread(self.files.remove, pruned["files"])
            if pruned["jobs"] or pruned["pipelines"] or pruned["batches"]:
                self.log.info(
                    "retention: deleted finished jobs",
                    jobs=pruned["jobs"],
                    pipelines=pruned["pipelines"],
                    batches=pruned["batches"],
                )
            if (
                pruned["jobs"] < queue.PRUNE_BATCH
                and pruned["pipelines"] == 0
                and pruned["batches"] < queue.PRUNE_BATCH
                and len(pruned["files"]) < queue.PRUNE_BATCH
            ):
                break

    async def remove_unrecorded(self) -> None:
        """Delete bytes no row names, older than the retention (and than :data:`UNRECORDED_MIN_AGE_SECS`):
        a file whose transaction rolled back after its bytes were written (a refused or failed request, a
        commit that failed, a killed process), bytes whose row retention deleted just before the process
        stopped, and temporary files a write left. Retention deletes files by their rows, so without this
        nothing would ever find them."""
        age = max(self.settings.job_retention_days * 86400.0, UNRECORDED_MIN_AGE_SECS)
        ids, temps = await asyncio.to_thread(self.files.unrecorded_candidates, time.time() - age)
        gone: list[Any] = []
        for start in range(0, len(ids), UNRECORDED_CHECK_BATCH):
            async with answered(self.engine.connect(), self.answer_secs, self.log, "retention") as conn:
                gone += await self.files.remove_unrecorded(conn, ids[start : start + UNRECORDED_CHECK_BATCH])
        for path in temps:
            await asyncio.to_thread(path.unlink, missing_ok=True)
        if gone or temps:
            self.log.info(
                "retention: deleted stored bytes no file row names", files=len(gone), partial=len(temps)
            )

    async def remove_scratch_leftovers(self) -> None:
        """Delete the scratch directories (:mod:`app.worker.scratch`) older than
        :data:`SCRATCH_MIN_AGE_SECS` whose claim is not running now on any worker sharing the folder:
        an attempt removes its own when it ends, so these are a dead process's."""
        found = await asyncio.to_thread(
            scratch.leftovers, self.settings.data_dir, time.time() - SCRATCH_MIN_AGE_SECS
        )
        gone = []
        for start in range(0, len(found), UNRECORDED_CHECK_BATCH):
            chunk = found[start : start + UNRECORDED_CHECK_BATCH]
            async with answered(self.engine.connect(), self.answer_secs, self.log, "retention") as conn:
                running = await queue.running_claims(conn, list({d.job_id for d in chunk}))
            for leftover in chunk:
                claim = running.get(leftover.job_id)
                if claim is None or leftover.claim not in (None, claim):
                    await asyncio.to_thread(scratch.remove, leftover.path)
                    gone.append(leftover)
        if gone:
            self.log.info(
                "retention: deleted scratch directories of attempts no longer running", dirs=len(gone)
            )


class Upkeep:
    """Rows nobody reads any more: workers not seen for long, expired sessions, old sign-in attempts."""

    def __init__(self, engine: AsyncEngine, *, log: Any = None, answer_secs: float | None = None) -> None:
        self.engine = engine
        self.log = log
        self.answer_secs = answer_secs

    async def run_once(self) -> None:
        # Imported at the first upkeep (minutes after the start), not at the worker's import: the
        # password hashing it brings along (argon2 and cffi) cost every start about 4 ms.
        from app import auth

        async with answered(self.engine.begin(), self.answer_secs, self.log, "upkeep") as conn:
            await queue.forget_old(conn)
            await auth.prune_auth_rows(conn)


class Maintenance:
    """The ``sweep`` side task: :meth:`run` until cancelled. A database outage is logged and waited out;
    any other error of one part is that part's alone (:class:`app.worker.sweep_parts.Parts`): logged,
    counted, shown to admins and retried later, while the other parts and the worker's jobs go on."""

    def __init__(
        self,
        engine: AsyncEngine,
        settings: Settings,
        *,
        files: FileStore,
        tally: Tally,
        log: Any,
        wake: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.log = log
        self.enabled = True
        """Tests switch this off to show that without the sweep a lost job stays stuck."""
        self.parts = Parts(log, settings.worker_sweep_interval_secs)
        # Each transaction of the sweep waits for its answer as long as the completer and the lease keeper
        # wait for theirs: on a connection gone silent (behind a pooler or a proxy that keeps the TCP
        # connection alive, no keepalive notices) the sweep would otherwise wait for ever, and with it
        # the rescue of every expired lease and the firing of every schedule.
        self.bound_secs = settings.heartbeat_secs
        """How long one part of a pass may take before it is abandoned (``Parts.run``): a hung part (a lock
        held elsewhere, a silent path, a file system that stopped answering) holds the others up no
        longer than that."""
        # A part's transactions get a little longer than the part, so that the part's bound comes first:
        # its cancel ends a lock wait on the server (a closed connection would leave the statement waiting
        # there, holding the rescue's lock, until the lock is let go); they still close a silent one.
        bound = self.bound_secs + ABANDON_SECS
        self.rescue = ExpiredLeaseRescue(engine, tally=tally, log=log, on_rescued=wake, answer_secs=bound)
        self.schedules = ScheduleFiring(engine, settings, log=log, on_fired=wake, answer_secs=bound)
        self.approvals = ApprovalTimeouts(engine, log=log, on_rejected=wake, answer_secs=bound)
        self.retention = Retention(engine, settings, files=files, log=log, answer_secs=bound)
        self.upkeep = Upkeep(engine, log=log, answer_secs=bound)
        self.callbacks = CallbackSender(
            engine, settings, log=log.bind(task="callbacks"), answer_secs=settings.heartbeat_secs
        )

    async def run(self) -> None:
        # Callbacks wait on receivers (up to their timeout), so they have a loop of their own that
        # never delays a rescue.
        sender = asyncio.create_task(self._send_callbacks(), name="callbacks")
        try:
            await self._sweep()
        finally:
            sender.cancel()

    async def _sweep(self) -> None:
        last_maintenance = 0.0
        bound = self.bound_secs
        while True:
            await asyncio.sleep(self.settings.worker_sweep_interval_secs)
            if not self.enabled:
                continue
            # Each part through ``self.parts``, looked up at each pass (tests replace a part's run_once):
            # a part that raises, or is not over within the bound, is retried later on its own, and the
            # parts after it still run.
            try:
                await self.parts.run("rescue", lambda: self.rescue.run_once(), bound)
                await self.parts.run("schedules", lambda: self.schedules.run_once(), bound)
                await self.parts.run("approvals", lambda: self.approvals.run_once(), bound)
                if time.monotonic() - last_maintenance >= MAINTENANCE_INTERVAL_SECS:
                    last_maintenance = time.monotonic()
                    await self.parts.run("retention", lambda: self.retention.run_once(), bound)
                    await self.parts.run("upkeep", lambda: self.upkeep.run_once(), bound)
            except Exception as exc:
                # Only a database outage reaches here (Parts keeps every other error to its part).
                if not is_transient(exc):
                    raise
                self.log.warning("sweep failed: database unavailable", error=first_line(exc))

    async def _send_callbacks(self, idle_secs: float = 1.0) -> None:
        """Deliver callbacks until cancelled; a database outage is logged and waited out, any other error
        kept to this part (:class:`app.worker.sweep_parts.Parts`): the rows stay due and are tried again."""
        while True:
            try:
                sent = await self.parts.run("callbacks", lambda: self.callbacks.run_once())
            except Exception as exc:
                if not is_transient(exc):
                    raise
                self.callbacks.log.warning("callbacks: database unavailable", error=first_line(exc))
                sent = None
            if not sent:
                await asyncio.sleep(idle_secs)
