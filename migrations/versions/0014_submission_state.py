"""A person's submission state (waiting jobs, the per-minute window) read under their limits' lock, as a
function, so that the lock and the counts are one call and can sit inside the insert of the job.

The per-person limits are made exact under concurrency by a transaction-scoped advisory lock on the
person (:mod:`app.quotas`): a checked submission takes it, counts, inserts and commits, and the next one
waits for the lock and must then see that job. A statement sees the database as of its own start, so a
lock taken inside the statement that counts would count without the job committed while it waited: two
requests could both fit into the last free place. A ``VOLATILE`` function takes a new snapshot for each
query in it, so this one counts after its lock is held, and a submission can take the lock, count and
insert in one autocommit statement (the lock then lasts until that statement commits).

The counts are those :mod:`app.quotas` words: the person's ``queued`` jobs (when ``count_waiting``), and
the submission in the last ``window_secs`` that frees the next per-minute place when the limit is
reached (the ``skip + 1``-th newest; none while there are fewer; a pipeline's or a batch's jobs count as
one submission, processors' next jobs not at all; ``since_id`` bounds the scan of the owner's index, ids
being UUIDv7).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# ``skip`` is a bigint: the per-minute limit is any whole number a setting allows, and ``skip + 1`` of
# an int limit at 2,147,483,648 overflowed (a 500 on every submission).
# A submission has at least one job, so with at most ``skip`` jobs in the window there are at most
# ``skip`` submissions and no per-minute refusal to find: counting those jobs (at most ``skip + 1``) is
# cheaper than grouping and sorting every submission in the window, which is most of the work when
# the limit is high.
SUBMISSION_STATE = """
CREATE FUNCTION jobdesk_submission_state(
    lock_ns int, person int, count_waiting boolean, per_minute boolean, since_id uuid, window_secs float8,
    skip bigint
) RETURNS TABLE (waiting bigint, first timestamptz, db_now timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_ns, person);
    IF count_waiting THEN
        SELECT count(*) INTO waiting FROM jobs j WHERE j.user_id = person AND j.status = 'queued';
    END IF;
    IF per_minute AND (
        SELECT count(*) FROM (
            SELECT FROM jobs j
            WHERE j.user_id = person AND j.id >= since_id AND j.created_by_job IS NULL
              AND j.created_at > now() - make_interval(secs => window_secs)
            LIMIT skip + 1
        ) AS w
    ) > skip THEN
        SELECT min(j.created_at) INTO first FROM jobs j
        WHERE j.user_id = person AND j.id >= since_id AND j.created_by_job IS NULL
          AND j.created_at > now() - make_interval(secs => window_secs)
        GROUP BY COALESCE(j.pipeline_id, j.batch_id, j.id) ORDER BY 1 DESC OFFSET skip LIMIT 1;
    END IF;
    db_now := now();
    RETURN NEXT;
END
$$
"""


def upgrade() -> None:
    op.execute(SUBMISSION_STATE)


def downgrade() -> None:
    op.execute("DROP FUNCTION jobdesk_submission_state(int, int, boolean, boolean, uuid, float8, bigint)")
