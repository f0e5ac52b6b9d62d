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

A second signal during the stop forces it (the worker's :meth:`~app.worker.runner.Worker.hurry`).

This module imports nothing heavy: ``worker.py`` and, for ``jobdesk worker``, the top of :mod:`app.cli`
install it before importing anything else (click alone took a tenth of a second, during which a signal
killed the process); what is left is the interpreter's own start.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The process's stop requests. :meth:`install` once, early; :meth:`forward` hands each request (and
    one that came before) to the running worker."""

    def __init__(self) -> None:
        self.received: int | None = None
        """The first stop signal received, if any."""
        self.count = 0
        """How many stop signals were received (a second one forces the stop)."""
        self._target: Callable[[int, int], None] | None = None

    def install(self) -> None:
        """Catch SIGTERM and SIGINT from now on (only the main thread may; elsewhere, nothing changes)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) != self._handle:
                signal.signal(sig, self._handle)

    def forward(self, target: Callable[[int, int], None] | None) -> None:
        """Call ``target(signum, count)`` for each stop signal from now on (``count``: how many came so
        far), and at once for those received before (a signal just then may call it twice with the same
        count: what the worker does for each count is idempotent). No lock: the handler runs in the main
        thread, and would wait for ever for a lock that thread holds."""
        self._target = target
        received, count = self.received, self.count
        if target is not None and received is not None:
            target(received, count)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        self.count += 1
        count = self.count
        target = self._target
        if target is not None:
            target(signum, count)


STOP = StopSignals()
"""The process's one set of stop handlers."""
