"""A request whose changes the database refuses at commit gets a 503 saying nothing was saved, never
the 2xx its handler meant (app.web.commits)."""

from __future__ import annotations

import tests.support.forms
import tests.support.processors  # noqa: F401
from tests.support.webkit import app_client, bearer

# Refuses, at commit, any transaction that cancelled a job: the shape of a commit that fails after the
# handler has finished (a deferred constraint, the server shutting down, the connection lost at COMMIT).
REFUSE_CANCEL_AT_COMMIT = """
    CREATE FUNCTION test_refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
    CREATE CONSTRAINT TRIGGER refuse_cancel_at_commit AFTER INSERT ON job_events
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.to_status = 'cancelled')
        EXECUTE FUNCTION test_refuse_at_commit();
"""


async def test_a_commit_the_database_refuses_is_a_503_and_nothing_changed(make_settings, db_url, pg) -> None:
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        _, h = await bearer(db_url, "commit@example.com")
        job = (await client.post("/api/jobs", json={"type": "test.step"}, headers=h)).json()
        await pg.execute(REFUSE_CANCEL_AT_COMMIT)

        answer = await client.post(f"/api/jobs/{job['id']}/cancel", headers=h)

        assert answer.status_code == 503, answer.text
        assert "Nothing was saved" in answer.json()["detail"]
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job["id"]) == "queued"
        # The next request is served as usual (the session and its connection were let go).
        await pg.execute("DROP TRIGGER refuse_cancel_at_commit ON job_events")
        again = await client.post(f"/api/jobs/{job['id']}/cancel", headers=h)
        assert again.status_code == 200, again.text
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job["id"]) == "cancelled"


# Ends its own connection when a job of a batch named "doomed" is written: the connection lost in the
# middle of a request's transaction, on a statement run straight on asyncpg (a bulk enqueue's COPY).
END_CONNECTION_ON_DOOMED_JOB = """
    CREATE FUNCTION test_end_connection() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$;
    CREATE TRIGGER end_connection_on_doomed_job BEFORE INSERT ON jobs
        FOR EACH ROW WHEN (NEW.title LIKE 'doomed%') EXECUTE FUNCTION test_end_connection();
"""


async def test_a_connection_lost_mid_request_is_the_503_of_a_database_away(make_settings, db_url, pg) -> None:
    """A statement run straight on asyncpg (a batch's COPY) that loses its connection leaves SQLAlchemy
    unaware of it, so the rollback of the error answer fails too: the answer stays the 503 saying the
    database cannot be reached (the transaction ended with its connection), not the commit's "Nothing was
    saved: the database did not confirm the change", and it is not logged as a failed commit."""
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        _, h = await bearer(db_url, "lost@example.com")
        await pg.execute(END_CONNECTION_ON_DOOMED_JOB)
        rows = [{"seconds": 0}] * 3

        answer = await client.post(
            "/api/batches", json={"type": "test.step", "rows": rows, "name": "doomed"}, headers=h
        )

        assert answer.status_code == 503, answer.text
        assert answer.json()["detail"] == (
            "The database cannot be reached right now. Please try again in a moment."
        )
        assert await pg.fetchval("SELECT count(*) FROM batches") == 0
        assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
        # The next request gets a working connection.
        again = await client.post("/api/batches", json={"type": "test.step", "rows": rows}, headers=h)
        assert again.status_code == 201, again.text
        await pg.execute(
            "DROP TRIGGER end_connection_on_doomed_job ON jobs; DROP FUNCTION test_end_connection()"
        )
