"""SIGTERM and SIGINT for ``jobdesk worker``, caught before the command's imports.

The handlers are plain Python signal handlers (:func:`signal.signal`), not the event loop's
(``loop.add_signal_handler``), for two reasons:

* **before the loop runs** — the imports, the settings, the schema check take most of a second; a signal
  then killed the process (exit -15, or a ``KeyboardInterrupt`` traceback for SIGINT). Caught here, it
  is kept in :attr:`StopSignals.received` and the worker stops cleanly before it starts.
* **while a processor blocks the loop** — the loop runs its own handlers only between callbacks, so a
  processor stuck in ``time.sleep`` inside ``async def`` kept the stop from even beginning. Python runs
  these handlers in the main thread between bytecodes (a ``time.sleep`` is interrupted for it), so the
  stop is asked of the loop at once and the stop watch (:mod:`app.worker.stuck`) starts its clock.

A second signal during the stop forces it (the worker's :meth:`~app.worker.runner.Worker.hurry`) —
except a SIGTERM within :data:`ONE_REQUEST_SECS` of the SIGTERM counted before it, which is the same
request arriving twice: a service manager, ``docker stop`` or ``kill -TERM -- -<pgid>`` signals every
process of a group, and a parent that passes a SIGTERM on to its child (``make run``'s recipe shell, a
wrapper script) sends the child a second copy a few milliseconds later. Counted, it cut the running jobs
short and the process exited 3 after a stop nobody hurried. SIGINT counts every time: a terminal sends
one per Ctrl+C, so a second one is a person's, and uvicorn quits at once on it, whenever it comes.

``jobdesk serve`` leaves the signals to uvicorn, which stops the web server on them; its in-app worker
gets them through :meth:`StopSignals.chain`, which puts these handlers ahead of uvicorn's once uvicorn
has installed them (``_serving`` in :mod:`app.cli`, and :mod:`app.web_processes`).

This module imports nothing heavy: ``worker.py`` and, for ``jobdesk worker``, the top of :mod:`app.cli`
install it before importing anything else (click alone took a tenth of a second, during which a signal
killed the process); what is left is the interpreter's own start.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

ONE_REQUEST_SECS = 0.5
"""A SIGTERM this soon after the SIGTERM counted last is the same request passed on again, not a second
one: a parent passes it on within milliseconds (longer on a loaded machine), a person sends another
``kill`` seconds later at the soonest."""


class StopSignals:
    """The process's stop requests. :meth:`install` once, early; :meth:`forward` hands each request (and
    one that came before) to the running worker."""

    def __init__(self) -> None:
        self.received: int | None = None
        """The first stop signal received, if any."""
        self.count = 0
        """How many stop requests were received (a second one forces the stop): each stop signal, but a
        SIGTERM within :data:`ONE_REQUEST_SECS` of the one counted before it is the same request."""
        self.catching = False
        """Whether stop signals reach this process's :meth:`forward` target (:meth:`install`, :meth:`chain`)."""
        self._target: Callable[[int, int], None] | None = None
        self._repeats = True
        self._sigterm_at: float | None = None
        """When the last counted SIGTERM came (:func:`time.monotonic`)."""

    def install(self) -> None:
        """Catch SIGTERM and SIGINT from now on (only the main thread may; elsewhere, nothing changes)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) != self._handle:
                signal.signal(sig, self._handle)
        self.catching = True

    def chain(self, *, repeats: bool = True) -> None:
        """Catch SIGTERM and SIGINT ahead of the handlers installed now (uvicorn's, in ``jobdesk serve``),
        each of which still runs after this one's, as before (the code that installed them may put back
        the earlier ones later: this goes with them). Only the main thread may; elsewhere, and for a
        signal whose handler is not a Python function (the default, or ignored), nothing changes.

        ``repeats=False``: each signal counts as the first, for a process that gets one stop request as
        two signals (a web process of ``serve --workers N`` gets a Ctrl+C's SIGINT, or a service
        manager's SIGTERM, and then its supervisor's SIGTERM)."""
        if threading.current_thread() is not threading.main_thread():
            return
        chained: dict[int, Callable[[int, FrameType | None], object]] = {
            sig: then for sig in STOP_SIGNALS if callable(then := signal.getsignal(sig))
        }

        def handle(signum: int, frame: FrameType | None) -> None:
            try:
                self._handle(signum, frame)
            finally:
                chained[signum](signum, frame)

        for sig in chained:
            signal.signal(sig, handle)
        self._repeats = repeats
        self.catching = self.catching or bool(chained)

    def forward(self, target: Callable[[int, int], None] | None) -> None:
        """Call ``target(signum, count)`` for each stop signal from now on (``count``: how many came so
        far), and at once for those received before (a signal just then may call it twice with the same
        count: what the worker does for each count is idempotent). No lock: the handler runs in the main
        thread, and would wait for ever for a lock that thread holds."""
        self._target = target
        received, count = self.received, self._counted()
        if target is not None and received is not None:
            target(received, count)

    def unforward(self, target: Callable[[int, int], None]) -> None:
        """Stop calling ``target`` (when it is the one called: a later :meth:`forward` replaced it)."""
        if self._target == target:
            self._target = None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGTERM:
            now = time.monotonic()
            if self._sigterm_at is not None and now - self._sigterm_at < ONE_REQUEST_SECS:
                return  # the request counted already, passed on by a parent of this process
            self._sigterm_at = now
        if self.received is None:
            self.received = signum
        self.count += 1
        count = self._counted()
        target = self._target
        if target is not None:
            target(signum, count)

    def _counted(self) -> int:
        """The count a target is told: each signal is the first when repeats do not count."""
        return self.count if self._repeats else min(self.count, 1)


STOP = StopSignals()
"""The process's one set of stop handlers."""
