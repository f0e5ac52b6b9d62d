"""A pipeline step takes ``priority`` as a job does (the README's ``steps[2].priority``): -100 to 100,
above 0 for admins only, a 422 naming the step's field otherwise. The API refused it as an unknown
field, though the queue reads it."""

from __future__ import annotations

from typing import Any

import asyncpg

import tests.support.forms  # noqa: F401  (registers test.step)
from tests.support.webkit import add_token, add_user, app_client


def steps(*priorities: Any) -> list[dict[str, Any]]:
    return [{"key": f"s{i}", "type": "test.step", "priority": p} for i, p in enumerate(priorities)]


async def test_a_step_takes_a_priority_by_the_rule_of_jobs(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    settings = make_settings(worker_enabled=False)
    root = await add_user(db_url, "root@example.com", admin=True)
    ann = await add_user(db_url, "ann@example.com")
    as_root = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    as_ann = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    async with app_client(settings) as client:
        made = await client.post("/api/pipelines", json={"name": "p", "steps": steps(5, -3)}, headers=as_root)
        assert made.status_code == 201, made.text
        rows = await pg.fetch("SELECT step_key, priority FROM jobs ORDER BY step_key")
        assert [tuple(r) for r in rows] == [("s0", 5), ("s1", -3)]
        for who, body, field, words in (
            (as_ann, steps(0, 0, 5), "steps[2].priority", "admin"),
            (as_root, steps(101), "steps[0].priority", "from -100 to 100"),
            (as_root, steps(0, "5"), "steps[1].priority", "must be a whole number"),
        ):
            r = await client.post("/api/pipelines", json={"name": "q", "steps": body}, headers=who)
            assert r.status_code == 422, (body, r.text)
            assert field in r.json()["errors"], (body, r.text)
            assert words in r.json()["errors"][field], (body, r.text)
        mine = await client.post("/api/pipelines", json={"name": "r", "steps": steps(-100)}, headers=as_ann)
        assert mine.status_code == 201, mine.text
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 2


async def test_a_step_takes_max_attempts_by_the_rule_of_jobs(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """The queue reads a step's ``max_attempts`` too; the API refused it as an unknown field."""
    settings = make_settings(worker_enabled=False)
    ann = await add_user(db_url, "ann@example.com")
    as_ann = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    body = [{"key": "a", "type": "test.step", "max_attempts": 2}, {"key": "b", "type": "test.step"}]
    async with app_client(settings) as client:
        made = await client.post("/api/pipelines", json={"name": "p", "steps": body}, headers=as_ann)
        assert made.status_code == 201, made.text
        rows = await pg.fetch("SELECT step_key, max_attempts FROM jobs ORDER BY step_key")
        assert rows[0]["max_attempts"] == 2 and rows[1]["max_attempts"] != 2
        body[1]["max_attempts"] = 0
        r = await client.post("/api/pipelines", json={"name": "q", "steps": body}, headers=as_ann)
        assert r.status_code == 422, r.text
        assert "whole number from 1" in r.json()["errors"]["steps[1].max_attempts"], r.text
