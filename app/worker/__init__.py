"""The process that runs jobs: :mod:`~app.worker.runner` (the loop, job execution, batched completions),
:mod:`~app.worker.leases` (lease renewal, cancel checks, the rescue sweep and upkeep),
:mod:`~app.worker.listener` (LISTEN/NOTIFY with reconnection) and :mod:`~app.worker.cpu` (CPU-bound
processors in their own process). SQL lives in :mod:`app.jobs.queue`, never here."""
