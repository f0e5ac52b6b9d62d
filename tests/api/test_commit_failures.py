"""A request whose changes the database refuses gets an answer that says so and what it means, never the
2xx its handler meant nor a 500: at commit, a 503 saying nothing was saved (app.web.commits); its
connection lost, the 503 of a database away; a row it refers to deleted meanwhile, a 409 (app.server)."""

from __future__ import annotations

import asyncio
import errno
import threading
import uuid
from typing import Any

import asyncpg
import pytest
import structlog.testing

import tests.support.forms
import tests.support.processors  # noqa: F401
from app.db import asyncpg_dsn
from app.server import GONE_MESSAGE
from tests.support.webkit import app_client, bearer, csrf_from, login

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


def _delete_once_waited_for(dsn: str, user_id: int, deleted: threading.Event) -> None:
    """In a thread of its own (the test client holds the test's event loop while it waits for an answer):
    delete the person in a transaction, and commit once another backend waits for that row's lock."""

    async def run() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                await conn.execute("DELETE FROM users WHERE id = $1", user_id)
                deleted.set()
                for _ in range(500):
                    await conn.execute("SELECT pg_stat_clear_snapshot()")  # a fresh look each time
                    waiting = await conn.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock'"
                    )
                    if waiting:
                        break
                    await asyncio.sleep(0.01)
        finally:
            await conn.close()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/jobs", {"type": "test.step"}),  # one autocommit statement straight on asyncpg
        ("/api/batches", {"type": "test.step", "rows": [{}, {}]}),  # through the request's session
    ],
    ids=["job", "batch"],
)
async def test_a_row_deleted_while_a_request_refers_to_it_is_a_409(
    make_settings: Any, db_url: str, pg: asyncpg.Connection, path: str, body: dict[str, Any]
) -> None:
    """Something a request's rows refer to, deleted by another transaction while the request runs (here
    the person, whose deletion commits while the request's foreign-key check waits for it), is a 409
    that says so, not a 500; nothing is written. Both ways a statement reaches the database: wrapped by
    SQLAlchemy (a batch) and straight on asyncpg (one job)."""
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        user, h = await bearer(db_url, "gone@example.com")
        deleted = threading.Event()
        deleter = threading.Thread(
            target=_delete_once_waited_for, args=(asyncpg_dsn(db_url), user.id, deleted)
        )
        deleter.start()
        assert deleted.wait(10)
        r = await client.post(path, json=body, headers=h)
        deleter.join(10)
        assert r.status_code == 409, r.text
        assert r.json()["detail"] == GONE_MESSAGE
        assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
        assert await pg.fetchval("SELECT count(*) FROM batches") == 0


# Refuses a job's cancellation as a foreign key does a row whose referent another transaction deleted
# while the request ran (the race itself is timed in the test above): the 409 of app.server.
CANCEL_REFERS_TO_A_DELETED_ROW = """
    CREATE FUNCTION test_referent_gone() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN RAISE foreign_key_violation USING MESSAGE = 'referent gone'; END $$;
    CREATE TRIGGER cancel_refers_to_a_deleted_row BEFORE INSERT ON job_events
        FOR EACH ROW WHEN (NEW.to_status = 'cancelled') EXECUTE FUNCTION test_referent_gone();
"""


async def test_an_admins_request_refused_for_a_row_deleted_meanwhile_is_audited_once(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """That 409 refuses an admin's action as any other 4xx does, so it is on the audit trail, once per
    request, on the API and the pages alike (the after_exception hook of app.web.refused_requests); it
    left no entry, as it is the database's error and not the action's. A plain user's leaves none."""
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        _, owner = await bearer(db_url, "owner@example.com")
        _, root = await bearer(db_url, "root@example.com", admin=True)
        job_id = (await client.post("/api/jobs", json={"type": "test.step"}, headers=owner)).json()["id"]
        await pg.execute(CANCEL_REFERS_TO_A_DELETED_ROW)

        await login(client, "root@example.com")
        token = csrf_from((await client.get(f"/jobs/{job_id}")).text)
        answers = [
            await client.post(f"/api/jobs/{job_id}/cancel", headers=root),
            await client.post(f"/jobs/{job_id}/cancel", data={"_csrf_token": token}),
            await client.post(f"/admin/jobs/{job_id}/cancel", data={"_csrf_token": token}),
        ]
        assert [a.status_code for a in answers] == [409, 409, 409], [a.text[-500:] for a in answers]
        assert (await client.post(f"/api/jobs/{job_id}/cancel", headers=owner)).status_code == 409

        entries = await pg.fetch("SELECT action, target_ids, outcome FROM audit_log ORDER BY id")
        assert [(e["action"], e["outcome"]) for e in entries] == [
            ("job.cancel", f"refused: {GONE_MESSAGE}")
        ] * 3
        assert all(job_id in e["target_ids"] for e in entries), entries
        assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", uuid.UUID(job_id)) == "queued"


async def test_a_row_refused_for_a_deleted_referent_is_logged_with_the_database_words(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """The 409 says to the person only that something was deleted; the log keeps the database's own words
    (which constraint, which row), so a foreign key a normal request breaks through a fault of ours,
    not a deletion, can be found: that 409 was the one error answer logged nowhere."""
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        _, owner = await bearer(db_url, "owner@example.com")
        job_id = (await client.post("/api/jobs", json={"type": "test.step"}, headers=owner)).json()["id"]
        await pg.execute(CANCEL_REFERS_TO_A_DELETED_ROW)
        with structlog.testing.capture_logs() as logs:
            r = await client.post(f"/api/jobs/{job_id}/cancel", headers=owner)
        assert r.status_code == 409, r.text
        gone = [e for e in logs if e["event"] == "a row the request refers to was deleted"]
        assert len(gone) == 1 and gone[0]["log_level"] == "warning", logs
        assert "referent gone" in gone[0]["error"] and gone[0]["request_id"], gone


async def test_a_file_error_in_a_request_is_not_called_the_database_away(
    make_settings, db_url, pg, monkeypatch
) -> None:
    """An upload that fails on the files folder (the disk full) is the server's fault, logged as one; an
    ``OSError`` of a file is not answered with "The database cannot be reached"."""
    from app.files import FileStore

    async def disk_full(*args: Any, **kw: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(FileStore, "save", disk_full)
    settings = make_settings(worker_enabled=False)
    async with app_client(settings) as client:
        _, h = await bearer(db_url, "disk@example.com")
        with structlog.testing.capture_logs() as logs:
            answer = await client.post("/api/files", files={"file": ("a.csv", b"a,b\n1,2\n")}, headers=h)
        assert answer.status_code == 500, answer.text
        assert "database" not in answer.json()["detail"]
        assert [e for e in logs if e["event"] == "unhandled error"]
        assert await pg.fetchval("SELECT count(*) FROM files") == 0
