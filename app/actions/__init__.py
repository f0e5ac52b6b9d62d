"""Actions: the one place where a person's action on a job, a pipeline or a batch of jobs is carried out.

Each action decides who may do it (the owner, an admin, or nobody), makes the change through the queue
(:mod:`app.jobs.queue`, :mod:`app.pipelines`), and, when an admin acts, writes the audit entry
(:mod:`app.audit`) and the admin notice (:func:`app.jobs.outbox.record_admin_action`) in the caller's
transaction, so the entry and the notice exist exactly when the change committed.

* :mod:`app.actions.access` — which job types and templates a person may start;
* :mod:`app.actions.jobs` — submit, cancel, retry, run again, approve, reject, rerun, reschedule,
  run now, delete;
* :mod:`app.actions.pipelines` — start from a template or an ad-hoc spec, cancel;
* :mod:`app.actions.bulk` — retry or cancel many jobs at once (ticked ids, a filter, a failed group);
* :mod:`app.actions.selection` — the admin job filter and the SQL it turns into;
* :mod:`app.actions.trail` — who acts (:class:`Actor`) and the audit entry plus notice.

Web pages and the JSON API both call these functions; they differ only in how they read the input and
render the answer. This package imports nothing from :mod:`app.web`.
"""
