"""The process that runs jobs.

* :mod:`~app.worker.runner` — the :class:`~app.worker.runner.Worker`: its lifecycle and the claim loop;
* :mod:`~app.worker.executor` — running one job (input, timeout, in the event loop or in a process);
* :mod:`~app.worker.completer` — recording outcomes in batched ``queue.finish`` calls;
* :mod:`~app.worker.leases` — lease renewal, the worker's heartbeat and the durable cancel check;
* :mod:`~app.worker.maintenance` — the sweep: rescue of expired leases, schedules, retention, upkeep;
* :mod:`~app.worker.listener` — LISTEN/NOTIFY with reconnection;
* :mod:`~app.worker.cpu` — CPU-bound processors in their own process;
* :mod:`~app.worker.faults` — error texts and retrying through database outages;
* :mod:`~app.worker.main` — the standalone process (``jobdesk worker``).

SQL lives in :mod:`app.jobs.queue`, never here."""
