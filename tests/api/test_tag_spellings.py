"""A tag is kept in Unicode's composed form (NFC), on writing and in the ``?tag=`` filter alike:
``café`` typed with a precomposed ``é`` and with ``e`` and a combining accent look the same, and were two
tags, each found by its own spelling only. Case is kept (the tag rule's own choice). Migration 0028
makes the stored ones so."""

from __future__ import annotations

import uuid

import asyncpg

from app.db import asyncpg_dsn, run_migrations
from tests.support.webkit import app_client, bearer

COMPOSED = "caf\u00e9"
DECOMPOSED = "cafe\u0301"


async def test_one_tag_whichever_way_its_accents_were_typed(make_settings, db_url) -> None:
    settings = make_settings(worker_enabled=False)
    _, headers = await bearer(db_url, "tags@example.com")
    job = {"type": "http.request", "input_data": {"url": "https://example.com/"}}
    async with app_client(settings) as client:
        a = await client.post(
            "/api/jobs", json={**job, "tags": [COMPOSED, DECOMPOSED, "Caf\u00e9"]}, headers=headers
        )
        assert a.status_code == 201, a.text
        assert a.json()["tags"] == ["Caf\u00e9", COMPOSED]  # one café; a capital keeps its own tag
        b = await client.post("/api/jobs", json={**job, "tags": [DECOMPOSED]}, headers=headers)
        assert b.status_code == 201, b.text
        assert b.json()["tags"] == [COMPOSED]
        both = sorted([a.json()["id"], b.json()["id"]])
        for spelling in (COMPOSED, DECOMPOSED):
            listed = (await client.get("/api/jobs", params={"tag": spelling}, headers=headers)).json()
            assert sorted(j["id"] for j in listed["items"]) == both, spelling
        # counted as kept: fifty accented letters typed decomposed are fifty characters, not a hundred
        long = "e\u0301" * 50
        c = await client.post("/api/jobs", json={**job, "tags": [long]}, headers=headers)
        assert c.status_code == 201, c.text
        assert c.json()["tags"] == ["\u00e9" * 50]


async def test_the_migration_composes_stored_tags_and_keeps_one_of_two_spellings(fresh_db_url: str) -> None:
    await run_migrations(fresh_db_url, "0027")
    pg = await asyncpg.connect(asyncpg_dsn(fresh_db_url))
    try:
        user = await pg.fetchval(
            "INSERT INTO users (email, password_hash) VALUES ('a@example.com', 'x') RETURNING id"
        )
        jobs = [uuid.uuid4(), uuid.uuid4()]
        for jid in jobs:
            await pg.execute(
                "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts) "
                "VALUES ($1, 'noop', 'queued', $2, '{}', 1)",
                jid,
                user,
            )
        rows = [(COMPOSED, jobs[0]), (DECOMPOSED, jobs[0]), (DECOMPOSED, jobs[1]), ("Nightly", jobs[1])]
        await pg.executemany("INSERT INTO job_tags (tag, job_id) VALUES ($1, $2)", rows)

        await run_migrations(fresh_db_url)

        kept = await pg.fetch("SELECT tag, job_id FROM job_tags ORDER BY job_id, tag")
        assert sorted((r["tag"], r["job_id"]) for r in kept) == sorted(
            [(COMPOSED, jobs[0]), (COMPOSED, jobs[1]), ("Nightly", jobs[1])]
        )
    finally:
        await pg.close()
