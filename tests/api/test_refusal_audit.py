"""An admin's refused action is on the audit trail whatever refused it, on every path.

With Ann at her waiting limit, an admin's retry and run again of her jobs answered 429 and left no entry
on ``/admin/audit`` (only a 409 was audited), and the answer said "you have 3 waiting" to the admin
about Ann's jobs. A delete refused because the job runs left no entry either.
"""

from __future__ import annotations

from typing import Any

from tests.api.test_owner_limits import _alices_jobs, _queued
from tests.api.test_quotas import assert_limited, job, scene_of  # noqa: F401  (fixture)
from tests.support.webkit import csrf_from, login

WHOSE = "ann@example.com has 3 waiting jobs"


async def _refused(s: Any, action: str) -> list[str]:
    rows = await s.pg.fetch(
        "SELECT outcome FROM audit_log WHERE action = $1 AND outcome LIKE 'refused:%' ORDER BY id", action
    )
    return [r["outcome"] for r in rows]


async def test_an_admins_refusal_by_the_owners_limit_is_audited_on_every_path(
    scene_of: Any,  # noqa: F811
) -> None:
    s = await scene_of(user_max_waiting_jobs=3)
    done, failed, _other, batch = await _alices_jobs(s)
    assert_limited(await s.client.post(f"/api/jobs/{failed}/retry", headers=s.admin), WHOSE, "limit is 3")
    assert_limited(await s.client.post(f"/api/jobs/{done}/run-again", headers=s.admin), WHOSE)
    assert_limited(await s.client.post(f"/api/batches/{batch}/retry-failed", headers=s.admin), WHOSE)
    await login(s.client, "root@example.com")
    page = await s.client.get(f"/jobs/{failed}")
    r = await s.client.post(f"/jobs/{failed}/retry", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 429 and WHOSE in r.text, r.text
    expected = f"refused: Too many jobs waiting: {WHOSE}"
    for action, n in (("job.retry", 2), ("job.run_again", 1), ("batch.retry_failed", 1)):
        outcomes = await _refused(s, action)
        assert len(outcomes) == n and all(o.startswith(expected) for o in outcomes), (action, outcomes)
    # Nothing else was kept: the refusals put nothing in her queue.
    assert await _queued(s) == 3
    assert await s.pg.fetchval("SELECT count(*) FROM jobs WHERE status = 'failed'") == 4
    # Her own refusal speaks to her, and an owner's refusal is not an admin's audit entry.
    r = await s.client.post(f"/api/jobs/{failed}/retry", headers=s.user)
    assert_limited(r, "you have 3 waiting")
    assert len(await _refused(s, "job.retry")) == 2
    # A batch with no row left to retry is a refusal too (409).
    await s.pg.execute("UPDATE jobs SET status = 'completed' WHERE status = 'failed'")
    r = await s.client.post(f"/api/batches/{batch}/retry-failed", headers=s.admin)
    assert r.status_code == 409, r.text
    assert (await _refused(s, "batch.retry_failed"))[-1].startswith("refused: Nothing changed"), r.text


async def test_a_refused_delete_is_audited(scene_of: Any) -> None:  # noqa: F811
    s = await scene_of()
    jid = (await s.client.post("/api/jobs", json=job(), headers=s.user)).json()["id"]
    await s.pg.execute(
        "UPDATE jobs SET status = 'in_progress', started_at = now(), locked_by = 'w1', "
        "lease_expires_at = now() + interval '1 minute' WHERE id = $1",
        jid,
    )
    r = await s.client.delete(f"/api/jobs/{jid}", headers=s.admin)
    assert r.status_code == 409, r.text
    assert await _refused(s, "job.delete") == [f"refused: {r.json()['detail']}"]


async def test_a_refused_entry_claims_no_count_on_the_audit_page(scene_of: Any) -> None:  # noqa: F811
    """Releasing or cancelling the held jobs of someone who has none answered 409, and its entry read
    "1 job released" ("1 job cancelled") beside "refused: Nothing changed": the count was its targets'."""
    s = await scene_of()
    for name in ("release-jobs", "cancel-jobs"):
        r = await s.client.post(f"/api/users/{s.user_id}/{name}", headers=s.admin)
        assert r.status_code == 409 and "has no held jobs" in r.text, r.text
    rows = await s.pg.fetch("SELECT action, count, outcome FROM audit_log ORDER BY id")
    assert [(r["action"], r["count"]) for r in rows] == [("user.release_jobs", 0), ("user.cancel_jobs", 0)]
    assert all(r["outcome"].startswith("refused: Nothing changed") for r in rows), rows
    # An entry refused before refusals counted nothing says no count either.
    await s.pg.execute(
        "INSERT INTO audit_log (user_id, user_email, action, target_type, target_ids, count, outcome)"
        " VALUES ($1, 'root@example.com', 'pipeline.cancel', 'pipeline', '[\"x\"]'::jsonb, 1,"
        " 'refused: Nothing changed: the pipeline has already finished.')",
        s.admin_id,
    )
    await login(s.client, "root@example.com")
    page = (await s.client.get("/admin/audit")).text
    assert "has no held jobs" in page and "already finished" in page, page
    for claim in ("job released", "jobs released", "job cancelled", "jobs cancelled", "job stopped"):
        assert claim not in page, claim


async def test_every_refused_user_action_is_audited_on_the_page_and_the_api(scene_of: Any) -> None:  # noqa: F811
    """Refusals of the actions on accounts were audited only for an admin's own account (and only because
    the pages committed their 409 themselves): a reset password asked for with a token (403), a user
    created with a taken email (409) and a token issued with a token left no entry. Every user action
    now runs in one audited block (auditing_refusals), and so is a form to correct (a malformed email, a
    bad token name) and an unknown user: every refusal of an admin action is one entry."""
    s = await scene_of()
    r = await s.client.post(f"/api/users/{s.user_id}/reset-password", headers=s.admin)
    assert r.status_code == 403, r.text
    r = await s.client.post("/api/users/999999/reset-password", headers=s.admin)
    assert r.status_code == 403, r.text  # the same answer, before it says whether the id exists
    await login(s.client, "root@example.com")
    csrf = csrf_from((await s.client.get("/admin/users")).text)

    async def page(path: str, **data: str) -> Any:
        return await s.client.post(path, data={"_csrf_token": csrf, **data}, follow_redirects=False)

    r = await page("/admin/users", email="ann@example.com", password="a long password 1")
    assert r.status_code == 422 and "already exists" in r.text, r.text[-500:]
    assert (await page("/admin/users", email="not an email")).status_code == 422
    for action in ("revoke-admin", "disable", "reset-password"):
        assert (await page(f"/admin/users/{s.admin_id}/{action}")).status_code == 409, action
    assert (await page("/admin/users/999999/disable")).status_code == 404
    assert (await page(f"/admin/users/{s.user_id}/tokens", name="x" * 500)).status_code == 422
    for name in ("release-jobs", "cancel-jobs"):
        assert (await page(f"/admin/users/{s.user_id}/{name}")).status_code == 303, name
    rows = await s.pg.fetch("SELECT action, target_ids, count, outcome FROM audit_log ORDER BY id")
    got = [(e["action"], e["target_ids"], e["count"], e["outcome"].split(":")[0]) for e in rows]
    ann, root = f'["{s.user_id}"]', f'["{s.admin_id}"]'
    assert got == [
        ("user.reset_password", ann, 0, "refused"),
        ("user.reset_password", '["999999"]', 0, "refused"),
        ("user.create", None, 0, "refused"),
        ("user.create", None, 0, "refused"),
        ("user.revoke_admin", root, 0, "refused"),
        ("user.disable", root, 0, "refused"),
        ("user.reset_password", root, 0, "refused"),
        ("user.disable", '["999999"]', 0, "refused"),
        ("token.create", ann, 0, "refused"),
        ("user.release_jobs", ann, 0, "refused"),
        ("user.cancel_jobs", ann, 0, "refused"),
    ], rows
    words = [e["outcome"] for e in rows]
    assert "/admin/users" in words[0] and "already exists" in words[2], words
    assert "you cannot revoke your own admin rights" in words[4], words
    # and what was refused did not happen
    assert await s.pg.fetchval("SELECT count(*) FROM users") == 2
    assert await s.pg.fetchval("SELECT bool_and(is_active) AND bool_and(NOT must_change_password) FROM users")
