"""A job's events go with it through a trigger instead of a foreign key.

Every event is written by the queue package in the same statement or transaction as the change it
records, with the job's row inserted, updated or locked by that same transaction, so an event for a job
that does not exist cannot be written. The foreign key checked that again for every event row: an index
probe and a row lock (a WAL record) per event, three events per job. In the statements on the hot path
that was 13 % of a bulk enqueue of 10,000 jobs, 12 µs per job of each claim and completion, and a quarter
of a single enqueue's execution. What the key also did, deleting a job's events with the job (by every
path: a delete, the retention sweep, a cascade from its owner or its pipeline, ``TRUNCATE``), the
triggers here do. Their statements run with a snapshot taken after the delete, so an event committed by
a transaction the delete waited for is deleted too. After a ``TRUNCATE`` of ``jobs`` the events are
deleted, not truncated: a ``TRUNCATE`` that names both tables would refuse to truncate ``job_events``
again from its own trigger.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

STATEMENTS = [
    """
CREATE FUNCTION jobdesk_delete_job_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_events WHERE job_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$
""",
    """
CREATE FUNCTION jobdesk_truncate_job_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_events;
    RETURN NULL;
END
$$
""",
    """
CREATE TRIGGER jobs_delete_events AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION jobdesk_delete_job_events()
""",
    """
CREATE TRIGGER jobs_truncate_events AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION jobdesk_truncate_job_events()
""",
]


def upgrade() -> None:
    op.drop_constraint("fk_job_events_job_id_jobs", "job_events", type_="foreignkey")
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_truncate_events ON jobs")
    op.execute("DROP TRIGGER jobs_delete_events ON jobs")
    op.execute("DROP FUNCTION jobdesk_truncate_job_events()")
    op.execute("DROP FUNCTION jobdesk_delete_job_events()")
    op.execute("DELETE FROM job_events e WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = e.job_id)")
    op.create_foreign_key(
        "fk_job_events_job_id_jobs", "job_events", "jobs", ["job_id"], ["id"], ondelete="CASCADE"
    )
