"""The SQL the alerts package runs against ``alert_outbox`` and ``alert_deliveries``.

The rows themselves are written by :mod:`app.jobs.outbox`, in the transaction of the job transition
that causes them; everything after that — claiming, grouping, leasing, recording the outcome, pruning
and the admin page's reads — is here.
"""

from __future__ import annotations

from sqlalchemy import text

# --- claiming and grouping --------------------------------------------------------------------------

SELECT_DUE = text(
    """
    SELECT id, created_at, kind, fingerprint, payload, attempts FROM alert_outbox
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
    """
)
NOW = text("SELECT clock_timestamp()")
LOCK_FINGERPRINT = text("SELECT pg_advisory_xact_lock(:ns, hashtext(:fp))")
ALERT_LOCK_NS = 0x4A44_0008
"""First key of the per-fingerprint advisory locks (two-key locks never collide with one-key ones)."""
OPEN_WINDOW = text(
    """
    SELECT id, payload FROM alert_outbox
    WHERE fingerprint = :fp AND kind = 'summary' AND status = 'pending' AND attempts = 0
      AND next_attempt_at > clock_timestamp()
    ORDER BY id DESC LIMIT 1
    FOR UPDATE SKIP LOCKED
    """
)
"""The open grouping window of a fingerprint. Only the holder of the fingerprint's advisory lock looks
for it, so a lock held by someone else means another claim took the row because its window is over
(it is due): skipping it is right, and waiting for it could deadlock with that claim."""
INSERT_WINDOW = text(
    """
    INSERT INTO alert_outbox (kind, fingerprint, payload, next_attempt_at)
    VALUES ('summary', :fp, CAST(:payload AS jsonb), clock_timestamp() + make_interval(secs => :secs))
    RETURNING id
    """
)
SET_PAYLOAD = text("UPDATE alert_outbox SET payload = CAST(:payload AS jsonb) WHERE id = :id")
GROUP_INTO = text(
    """
    UPDATE alert_outbox SET status = 'suppressed', payload = payload || jsonb_build_object('grouped_into', CAST(:sid AS bigint))
    WHERE id = ANY(CAST(:ids AS bigint[]))
    """
)
SUPPRESS = text(
    "UPDATE alert_outbox SET status = 'suppressed', last_error = :reason WHERE id = ANY(CAST(:ids AS bigint[]))"
)
DELETE_ROWS = text("DELETE FROM alert_outbox WHERE id = ANY(CAST(:ids AS bigint[]))")
LEASE = text(
    """
    UPDATE alert_outbox SET attempts = attempts + 1,
        next_attempt_at = clock_timestamp() + make_interval(secs => :lease)
    WHERE id = ANY(CAST(:ids AS bigint[]))
    RETURNING id, attempts
    """
)
OWNERS = text("SELECT id, email FROM users WHERE id = ANY(CAST(:ids AS bigint[]))")

# --- recording the outcome --------------------------------------------------------------------------

INSERT_DELIVERY = text(
    """
    INSERT INTO alert_deliveries (alert_id, channel, ok, status_code, error, summary)
    VALUES (:alert_id, :channel, :ok, :status_code, :error, :summary)
    """
)
FINISH_ROW = text(
    """
    UPDATE alert_outbox SET status = :status,
        last_error = CASE WHEN :status = 'sent' THEN NULL ELSE COALESCE(:last_error, last_error) END,
        next_attempt_at = clock_timestamp() + make_interval(secs => :delay),
        sent_at = CASE WHEN :any_sent THEN COALESCE(sent_at, now()) ELSE sent_at END,
        payload = payload || jsonb_build_object('_channels', CAST(:channels AS jsonb), '_errors', CAST(:errors AS jsonb))
    WHERE id = :id AND attempts = :attempts AND status = 'pending'
    """
)
"""Only the round that holds the row's lease (same ``attempts``) records its outcome: a row whose lease
ran out and was claimed again is left to the newer round."""

# --- retention --------------------------------------------------------------------------------------

PRUNE_OUTBOX = text(
    """
    DELETE FROM alert_outbox WHERE id IN (
        SELECT id FROM alert_outbox WHERE created_at < now() - make_interval(days => :days)
        ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED)
    """
)
PRUNE_DELIVERIES = text(
    """
    DELETE FROM alert_deliveries WHERE id IN (
        SELECT id FROM alert_deliveries WHERE at < now() - make_interval(days => :days)
        ORDER BY id LIMIT :batch FOR UPDATE SKIP LOCKED)
    """
)

# --- the admin page ---------------------------------------------------------------------------------

RECENT_DELIVERIES = text(
    """
    SELECT d.id, d.at, d.channel, d.ok, d.status_code, d.error, d.summary, d.alert_id, o.kind, o.status
    FROM alert_deliveries d LEFT JOIN alert_outbox o ON o.id = d.alert_id
    WHERE CAST(:before AS bigint) IS NULL OR d.id < CAST(:before AS bigint)
    ORDER BY d.id DESC LIMIT :limit
    """
)
PENDING_COUNTS = text(
    """
    SELECT count(*) FILTER (WHERE kind <> 'summary') AS pending,
           count(*) FILTER (WHERE kind = 'summary' AND attempts = 0) AS windows
    FROM alert_outbox WHERE status = 'pending'
    """
)
