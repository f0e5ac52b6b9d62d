"""The release of a completed job's dependents as a function, so that it runs with a snapshot of its own.

A job enqueued with ``depends_on`` locks its parents (``FOR SHARE``) and counts the unfinished ones; a
parent's completion waits for that lock and must then see the new dependency rows. A statement sees the
database as of its own start, so a completion and the release of its dependents in one statement would
miss a dependency committed while the statement waited for the parent's row: the child would wait
forever. A ``VOLATILE`` function takes a new snapshot for its query, so a completion statement can call
it once its own row locks are held, and the worker's completion stays one statement.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# The dependents are locked in id order before they are updated: completions of parents that share
# children (on different workers, at the same moment) then queue behind each other instead of
# deadlocking on rows locked in opposite orders. Returns whether a dependent became claimable (it sent
# the NOTIFY then).
RELEASE_DEPENDENTS = """
CREATE FUNCTION jobdesk_release_dependents(parents uuid[]) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    WITH d AS (
        SELECT job_id, count(*) AS n FROM job_dependencies WHERE depends_on = ANY(parents) GROUP BY job_id
    ), locked AS (
        SELECT c.id FROM jobs c JOIN d ON d.job_id = c.id ORDER BY c.id FOR UPDATE OF c
    ), released AS (
        UPDATE jobs c SET pending_parents = c.pending_parents - d.n, updated_at = now()
        FROM d JOIN locked ON locked.id = d.job_id
        WHERE c.id = d.job_id AND c.status = 'queued' AND c.pending_parents > 0
        RETURNING c.pending_parents = 0 AND c.run_at <= now() AS due
    ), notify AS (
        SELECT pg_notify('jobdesk_jobs', '') FROM released WHERE due LIMIT 1
    )
    SELECT EXISTS (SELECT 1 FROM notify)
$$
"""


def upgrade() -> None:
    op.execute(RELEASE_DEPENDENTS)


def downgrade() -> None:
    op.execute("DROP FUNCTION jobdesk_release_dependents(uuid[])")
