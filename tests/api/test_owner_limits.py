"""A retry or a run again is held to the limits of the job's owner on every path, whoever acts: one job's
retry and run again (API and page), a batch's "Retry failed rows" and a bulk retry.

An admin's retry went around the owner's waiting limit: with ``USER_MAX_WAITING_JOBS=3`` and three jobs
of Alice's waiting, an admin's "Retry failed rows" of her batch answered ``retried: 2``, and one job's
retry, run again and a bulk retry were accepted too.
"""

from __future__ import annotations

from typing import Any

from tests.api.test_quotas import Scene, assert_limited, job, scene_of  # noqa: F401  (fixture)
from tests.support.webkit import csrf_from, login


async def _queued(s: Scene) -> int:
    return int(await s.pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'queued'"))


async def _alices_jobs(s: Scene) -> tuple[str, str, str, str]:
    """Alice's finished job, two failed ones and a batch of two failed rows; then three jobs waiting."""
    ids = [(await s.client.post("/api/jobs", json=job(i), headers=s.user)).json()["id"] for i in range(3)]
    await s.pg.execute("UPDATE jobs SET status = 'completed', completed_at = now() WHERE id = $1", ids[0])
    finish = "UPDATE jobs SET status = 'failed', attempts = max_attempts, completed_at = now() WHERE status = 'queued'"
    await s.pg.execute(finish)
    r = await s.client.post("/api/batches", json={"type": "test.step", "rows": [{}, {}]}, headers=s.user)
    assert r.status_code == 201, r.text
    batch = r.json()["id"]
    await s.pg.execute(finish)
    for i in range(3):
        assert (await s.client.post("/api/jobs", json=job(10 + i), headers=s.user)).status_code == 201
    assert await _queued(s) == 3
    return ids[0], ids[1], ids[2], batch


async def test_an_admins_retry_is_held_to_the_owners_waiting_limit_on_every_path(
    scene_of: Any,  # noqa: F811
) -> None:
    s = await scene_of(user_max_waiting_jobs=3)
    done, failed, other, batch = await _alices_jobs(s)
    words = ("you have 3 waiting", "limit is 3")
    assert_limited(await s.client.post(f"/api/batches/{batch}/retry-failed", headers=s.admin), *words)
    assert_limited(await s.client.post(f"/api/jobs/{failed}/retry", headers=s.admin), *words)
    assert_limited(await s.client.post(f"/api/jobs/{done}/run-again", headers=s.admin), *words)
    # The admin's pages: a job's Retry and Run again.
    await login(s.client, "root@example.com")
    for action, jid in (("retry", failed), ("run-again", done)):
        page = await s.client.get(f"/jobs/{jid}")
        r = await s.client.post(f"/jobs/{jid}/{action}", data={"_csrf_token": csrf_from(page.text)})
        assert r.status_code == 429 and "Too many jobs waiting" in r.text, (action, r.text)
    # A bulk retry skips them, saying why, and changes nothing.
    r = await s.client.post(
        "/api/jobs/bulk", json={"action": "retry", "ids": [failed, other]}, headers=s.admin
    )
    assert r.status_code == 200, r.text
    assert (r.json()["done"], sorted(r.json()["skipped"])) == ([], sorted([failed, other])), r.json()
    assert "2 because of their owner's limits" in r.json()["message"], r.json()
    assert "limit is 3" in r.json()["message"], r.json()
    assert await _queued(s) == 3
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 4
    # With one place free, a bulk retry takes one and skips the other with the reason.
    waiting = await s.pg.fetchval("SELECT id FROM jobs WHERE status = 'queued' ORDER BY id LIMIT 1")
    assert (await s.client.post(f"/api/jobs/{waiting}/cancel", headers=s.user)).status_code == 200
    r = await s.client.post(
        "/api/jobs/bulk", json={"action": "retry", "ids": [failed, other]}, headers=s.admin
    )
    assert r.status_code == 200, r.text
    assert (r.json()["done"], r.json()["skipped"]) == ([failed], [other]), r.json()
    assert "1 because of their owner's limits" in r.json()["message"], r.json()
    assert await _queued(s) == 3
    # The admin's own submissions stay exempt.
    for i in range(4):
        assert (await s.client.post("/api/jobs", json=job(20 + i), headers=s.admin)).status_code == 201
