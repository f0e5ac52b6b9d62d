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
    words = ("ann@example.com has 3 waiting jobs", "limit is 3")
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


async def _age(s: Scene) -> None:
    """Move every submission so far out of the per-minute window."""
    await s.pg.execute("UPDATE jobs SET created_at = created_at - interval '2 minutes'")
    await s.pg.execute("UPDATE counted_retries SET at = at - interval '2 minutes'")


FAIL_ALL = (
    "UPDATE jobs SET status = 'failed', attempts = max_attempts, completed_at = now() WHERE status = 'queued'"
)


async def test_a_persons_own_retries_count_against_their_per_minute_limit_on_every_path(
    scene_of: Any,  # noqa: F811
) -> None:
    """Nine retries and seven "Retry failed rows" within a minute all passed a limit of five, and a new job
    right after too: a retry made no job row for the window to count."""
    s = await scene_of(user_max_jobs_per_minute=5)
    failed = [(await s.client.post("/api/jobs", json=job(i), headers=s.user)).json()["id"] for i in range(4)]
    r = await s.client.post("/api/batches", json={"type": "test.step", "rows": [{}, {}, {}]}, headers=s.user)
    assert r.status_code == 201, r.text
    batch = r.json()["id"]
    await _age(s)
    failed += [(await s.client.post("/api/jobs", json=job(i), headers=s.user)).json()["id"] for i in range(2)]
    await _age(s)
    await s.pg.execute(FAIL_ALL)
    # Five submissions: four retries of one job and one "Retry failed rows" (three rows, counted once).
    for jid in failed[:4]:
        assert (await s.client.post(f"/api/jobs/{jid}/retry", headers=s.user)).status_code == 200
    r = await s.client.post(f"/api/batches/{batch}/retry-failed", headers=s.user)
    assert r.status_code == 200 and r.json()["retried"] == 3, r.text
    await s.pg.execute(FAIL_ALL)
    words = ("Too many submissions", "limit is 5 a minute")
    assert_limited(await s.client.post(f"/api/jobs/{failed[4]}/retry", headers=s.user), *words)
    assert_limited(await s.client.post(f"/api/batches/{batch}/retry-failed", headers=s.user), *words)
    assert_limited(await s.client.post("/api/jobs", json=job(9), headers=s.user), *words)
    await login(s.client, "ann@example.com")
    page = await s.client.get(f"/jobs/{failed[4]}")
    r = await s.client.post(f"/jobs/{failed[4]}/retry", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 429 and "Too many submissions" in r.text, r.text
    assert await _queued(s) == 0
    # An admin's retry of her job is not her submission: neither refused by nor counted in her minute.
    assert (await s.client.post(f"/api/jobs/{failed[4]}/retry", headers=s.admin)).status_code == 200
    assert await s.pg.fetchval("SELECT count(*) FROM counted_retries") == 5
    # Once the retries leave the minute, she may submit again.
    await s.pg.execute("UPDATE counted_retries SET at = at - interval '2 minutes'")
    assert (await s.client.post("/api/jobs", json=job(10), headers=s.user)).status_code == 201


async def test_an_admins_rerun_is_held_to_the_owners_waiting_limit_on_the_api_and_the_page(
    scene_of: Any,  # noqa: F811
) -> None:
    """A rerun puts a step waiting for approval back in its owner's queue, as a retry does: with the owner
    at the waiting limit it is refused with the owner's limit, on the API and on the job's page, and the
    step keeps waiting for its decision."""
    s = await scene_of(user_max_waiting_jobs=3)
    review = {
        "name": "review",
        "steps": [{"key": "draft", "type": "test.step", "input_data": {}, "requires_approval": True}],
    }
    r = await s.client.post("/api/pipelines", json=review, headers=s.user)
    assert r.status_code == 201, r.text
    step = r.json()["steps"][0]["job_id"]
    await s.pg.execute("UPDATE jobs SET status = 'waiting_approval', attempts = 1 WHERE id = $1::uuid", step)
    for i in range(3):
        assert (await s.client.post("/api/jobs", json=job(i), headers=s.user)).status_code == 201
    words = ("ann@example.com has 3 waiting jobs", "limit is 3")
    assert_limited(await s.client.post(f"/api/jobs/{step}/rerun", headers=s.admin), *words)
    await login(s.client, "root@example.com")
    page = await s.client.get(f"/jobs/{step}")
    r = await s.client.post(f"/jobs/{step}/rerun", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 429 and "Too many jobs waiting" in r.text, r.text
    assert await s.pg.fetchval("SELECT status FROM jobs WHERE id = $1::uuid", step) == "waiting_approval"
    # With a place free, the rerun goes through.
    waiting = await s.pg.fetchval("SELECT id FROM jobs WHERE status = 'queued' ORDER BY id LIMIT 1")
    assert (await s.client.post(f"/api/jobs/{waiting}/cancel", headers=s.user)).status_code == 200
    assert (await s.client.post(f"/api/jobs/{step}/rerun", headers=s.admin)).status_code == 200
    assert await _queued(s) == 3
