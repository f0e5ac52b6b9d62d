"""Named approvers through the JSON API, the approver's pages and the one-click link: a listed person
who is not an admin decides; anyone not listed gets 403 on every path when they may see the job (its
owner, an admin), the unknown id's 404 otherwise; the submitter may not approve
their own step unless ``owner`` is listed; a link's token is signed and expires; each decision is kept
with who, when and the comment. Steps are moved to ``waiting_approval`` by a pretend worker."""

from __future__ import annotations

import time
import uuid
from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

import tests.support.forms  # noqa: F401  (test.step)
from app.actions import approvals as approval_actions
from app.alerts import describe
from app.jobs.approvals import link_problem, link_token
from app.settings import Settings
from tests.support.jobsteps import claim, finish
from tests.support.webkit import HX, add_token, add_user, csrf_from, switch_to


def spec(**approval: Any) -> dict[str, Any]:
    return {
        "name": "press release",
        "steps": [
            {"key": "draft", "type": "test.step", "input_data": {}, "requires_approval": True, **approval},
            {"key": "publish", "type": "test.step", "input_data": {}, "depends_on": ["draft"]},
        ],
    }


async def waiting(
    client: AsyncTestClient,
    engine: AsyncEngine,
    settings: Settings,
    pg: asyncpg.Connection,
    headers: dict[str, str],
    **approval: Any,
) -> uuid.UUID:
    r = await client.post("/api/pipelines", json=spec(**approval), headers=headers)
    assert r.status_code == 201, r.text
    jid = next(s["job_id"] for s in r.json()["steps"] if s["key"] == "draft")
    jid = uuid.UUID(str(jid))
    await claim(engine, jid)
    await finish(engine, settings, jid, "completed", result={"headline": "We ship", "words": 412})
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"
    return jid


async def token_of(db_url: str, user: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}


async def test_a_named_approver_decides_through_the_api_and_nobody_else_may(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "owner@example.com")
    ann = await add_user(db_url, "ann@example.com")
    bob = await add_user(db_url, "bob@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    as_owner, as_ann, as_bob, as_root = [await token_of(db_url, u) for u in (owner, ann, bob, root)]

    r = await client.post("/api/pipelines", json=spec(approvers=["nobody@example.com"]), headers=as_owner)
    assert r.status_code == 422, r.text
    assert "steps[0].approvers[0]" in r.json()["errors"]
    # a disabled account cannot decide: a step only it could approve would wait for ever
    await add_user(db_url, "gone@example.com", active=False)
    r = await client.post("/api/pipelines", json=spec(approvers=["gone@example.com"]), headers=as_owner)
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == {
        "steps[0].approvers[0]": "the account gone@example.com is disabled, so it cannot approve"
    }
    r = await client.post(
        "/api/pipelines", json=spec(approvers=["ann@example.com"], approvals_needed=3), headers=as_owner
    )
    assert r.status_code == 422 and "steps[0].approvals_needed" in r.json()["errors"], r.text

    jid = await waiting(client, engine, ui_settings, pg, as_owner, approvers=["ann@example.com"])
    listed = (await client.get("/api/approvals", headers=as_ann)).json()
    assert [i["job_id"] for i in listed["items"]] == [str(jid)]
    assert listed["items"][0]["result_data"] == {"headline": "We ship", "words": 412}
    for who in (as_bob, as_owner, as_root):
        assert (await client.get("/api/approvals", headers=who)).json()["items"] == []
        for path, body in (
            ("/api/jobs/{}/approve", None),
            ("/api/approvals/{}/approve", {}),
            ("/api/jobs/{}/reject", {"reason": "no"}),
            ("/api/approvals/{}/reject", {"comment": "no"}),
        ):
            r = await client.post(path.format(jid), json=body, headers=who)
            assert r.status_code == (404 if who is as_bob else 403), (path, r.text)
    assert await pg.fetchval("SELECT count(*) FROM job_approvals") == 0

    # a rejection without its reason names the field this route takes (the pages' and /api/jobs' is reason)
    for body in ({"comment": ""}, {"comment": "   "}, None):
        r = await client.post(f"/api/approvals/{jid}/reject", json=body, headers=as_ann)
        assert r.status_code == 422 and list(r.json()["errors"]) == ["comment"], r.text
    r = await client.post(f"/api/approvals/{jid}/approve", json={"comment": "fine by me"}, headers=as_ann)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "completed"
    row = await pg.fetchrow("SELECT user_id, decision, comment, at FROM job_approvals WHERE job_id = $1", jid)
    assert (row["user_id"], row["decision"], row["comment"]) == (ann.id, "approved", "fine by me")
    r = await client.post(f"/api/jobs/{jid}/approve", headers=as_ann)
    assert r.status_code == 409, r.text


async def test_two_approvals_from_two_people_and_the_owner_only_when_listed(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "owner@example.com")
    ann = await add_user(db_url, "ann@example.com")
    as_owner, as_ann = await token_of(db_url, owner), await token_of(db_url, ann)
    jid = await waiting(
        client, engine, ui_settings, pg, as_owner, approvers=["ann@example.com", "owner"], approvals_needed=2
    )
    r = await client.post(f"/api/jobs/{jid}/approve", headers=as_ann)
    assert r.status_code == 200 and r.json()["status"] == "waiting_approval", r.text
    r = await client.post(f"/api/jobs/{jid}/approve", headers=as_ann)
    assert r.status_code == 409 and "already approved" in r.json()["detail"], r.text
    # the owner, listed as "owner", approves on the job page (not an admin: the step's rule decides)
    await switch_to(client, "owner@example.com")
    page = await client.get(f"/jobs/{jid}")
    assert 'id="act-approve"' in page.text
    r = await client.post(f"/jobs/{jid}/approve", data={"_csrf_token": csrf_from(page.text)}, headers=HX)
    assert r.status_code == 200, r.text[-500:]
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "completed"
    assert await pg.fetchval("SELECT count(DISTINCT user_id) FROM job_approvals WHERE job_id = $1", jid) == 2


def test_web_hosts_whose_clocks_are_minutes_apart_agree_on_a_links_expiry(monkeypatch: Any) -> None:
    """A link is signed on one web host and opened on another, their clocks ten minutes off either way
    (the database's is right, and each host's dbclock knows its offset). On the hosts' own clocks, a
    link signed on the slow host was refused as expired by the fast one within its five minutes, and one
    signed on the fast host was still accepted by the slow one after they were over."""
    from app import dbclock

    start = time.time()

    def on_host(skew: float, *, after: float) -> None:
        """``after`` seconds past the start, on a host whose clock is ``skew`` seconds off."""
        monkeypatch.setattr(time, "time", lambda: start + after + skew)
        monkeypatch.setattr(time, "time_ns", lambda: int((start + after + skew) * 1e9))
        monkeypatch.setattr(dbclock, "_offset_ns", int(-skew * 1e9))

    secret, jid = "s3cret", uuid.uuid4()
    on_host(-600, after=0)
    slow_signed = link_token(secret, jid, ttl=300)
    on_host(+600, after=0)
    fast_signed = link_token(secret, jid, ttl=300)
    for skew in (-600, 0, +600):
        on_host(skew, after=60)
        assert link_problem(secret, jid, slow_signed) is None, skew
        assert link_problem(secret, jid, fast_signed) is None, skew
        on_host(skew, after=400)
        assert "expired" in (link_problem(secret, jid, slow_signed) or ""), skew
        assert "expired" in (link_problem(secret, jid, fast_signed) or ""), skew


async def test_the_page_and_the_one_click_link_need_a_named_approver_and_a_good_token(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "owner@example.com")
    await add_user(db_url, "ann@example.com")
    await add_user(db_url, "bob@example.com")
    as_owner = await token_of(db_url, owner)
    jid = await waiting(client, engine, ui_settings, pg, as_owner, approvers=["ann@example.com"])
    secret = ui_settings.resolved_secret_key()
    token = link_token(secret, jid)

    # signed out: the link asks for sign-in and keeps the token for afterwards
    r = await client.get(f"/approvals/{jid}?token={token}", follow_redirects=False)
    assert r.status_code in (302, 303) and "login" in r.headers["location"], r.status_code

    # someone the step does not name, with the link forwarded to them: as for an unknown id
    await switch_to(client, "bob@example.com")
    r = await client.get(f"/approvals/{jid}?token={token}")
    assert r.status_code == 404, r.text[-500:]
    bobs = csrf_from((await client.get("/approvals")).text)
    r = await client.post(f"/approvals/{jid}/approve", data={"_csrf_token": bobs, "token": token})
    assert r.status_code == 404

    await switch_to(client, "ann@example.com")
    page = await client.get(f"/approvals/{jid}?token={token}")
    assert page.status_code == 200, page.text[-500:]
    assert 'id="approve"' in page.text and "We ship" in page.text
    anns = csrf_from(page.text)
    assert (
        await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"
    )  # GET decided nothing
    tampered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    expired = link_token(secret, jid, now=time.time() - 8 * 86400)
    other = link_token(secret, uuid.uuid4())
    later = f"{int(token.split('.')[0]) + 3600}.{token.split('.')[1]}"  # a longer life, the same signature
    for bad in (tampered, expired, other, later):
        assert (await client.get(f"/approvals/{jid}?token={bad}")).status_code == 403
        r = await client.post(f"/approvals/{jid}/approve", data={"_csrf_token": anns, "token": bad})
        assert r.status_code == 403
    assert "expired" in (link_problem(secret, jid, expired) or "")
    assert await pg.fetchval("SELECT count(*) FROM job_approvals") == 0
    r = await client.post(
        f"/approvals/{jid}/approve", data={"_csrf_token": anns, "token": token, "comment": "ok"}
    )
    assert r.status_code == 200, r.text[-500:]
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "completed"
    assert "ann@example.com" in r.text and "ok" in r.text  # the decision shows with who and the comment
    await switch_to(client, "owner@example.com")
    job_page = (await client.get(f"/jobs/{jid}")).text
    assert 'id="approvals"' in job_page and "<strong>ann@example.com</strong> approved" in job_page
    assert "<q>ok</q>" in job_page


async def test_the_alert_about_a_waiting_step_carries_a_signed_link(ui_settings: Settings) -> None:
    jid = uuid.uuid4()
    message = describe(
        "approval_needed",
        {"job_id": str(jid), "type": "noop", "user_id": 1},
        created_at=None,
        owner_email="owner@example.com",
        base_url="https://jobs.example.com/",
        link_secret="s3cret",
    )
    assert message.url and message.url.startswith(f"https://jobs.example.com/approvals/{jid}?token=")
    assert link_problem("s3cret", jid, message.url.split("token=")[1]) is None
    assert link_problem("other", jid, message.url.split("token=")[1]) is not None


async def test_the_inbox_lists_oldest_first_and_a_decided_row_goes_away(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    owner = await add_user(db_url, "owner@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    as_owner = await token_of(db_url, owner)
    first = await waiting(client, engine, ui_settings, pg, as_owner, approvers=["admins"])
    second = await waiting(client, engine, ui_settings, pg, as_owner)
    await pg.execute("UPDATE jobs SET updated_at = now() - interval '3 hours' WHERE id = $1", second)
    async with AsyncSession(engine) as db:  # keyset pages, oldest first
        one = await approval_actions.inbox(db, root, limit=1)
        assert [r["id"] for r in one.rows] == [second] and one.after
        two = await approval_actions.inbox(db, root, after=one.after, limit=1)
        assert [r["id"] for r in two.rows] == [first] and two.after is None
    await switch_to(client, "root@example.com")
    assert (await client.get("/admin/approvals?after=nonsense")).status_code == 422
    page = await client.get("/admin/approvals")
    assert page.status_code == 200
    assert page.text.index(f"approval-{second}") < page.text.index(f"approval-{first}")
    assert "owner@example.com" in page.text and ">3 h</time>" in page.text
    admin_page = await client.get("/admin/health")
    assert 'href="/admin/approvals">2 waiting for approval' in admin_page.text, admin_page.text[:3000]
    token = csrf_from(page.text)
    r = await client.post(
        f"/approvals/{second}/approve",
        data={"_csrf_token": token},
        headers={**HX, "HX-Target": f"approval-{second}"},
    )
    assert r.status_code == 200 and f"approval-{second}" not in r.text, r.text
    r = await client.post(
        f"/approvals/{first}/reject",
        data={"_csrf_token": token, "reason": ""},
        headers={**HX, "HX-Target": f"approval-{first}"},
    )
    assert r.status_code == 422 and f"approval-{first}" in r.text  # the row stays, saying why
    assert f"approval-{second}" not in (await client.get("/admin/approvals")).text


async def test_a_step_without_a_name_is_shown_by_its_type_s_title(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    # the list and the step's page showed the bare type name ("http.request") as the step's title
    owner = await add_user(db_url, "owner@example.com")
    await add_user(db_url, "ann@example.com")
    jid = await waiting(
        client, engine, ui_settings, pg, await token_of(db_url, owner), approvers=["ann@example.com"]
    )
    assert await pg.fetchval("SELECT title FROM jobs WHERE id = $1", jid) is None
    await switch_to(client, "ann@example.com")
    listed = (await client.get("/approvals")).text
    assert f'<a href="/approvals/{jid}">A step</a>' in listed
    page = (await client.get(f"/approvals/{jid}")).text
    assert "<title>Approve A step?" in page and "<h1>A step</h1>" in page


INVISIBLE = "\u200b\u202e\ufeff \u2060"
"""A zero-width space, a right-to-left override, a byte-order mark, a space and a word joiner."""


async def test_a_reason_of_invisible_characters_only_is_refused_as_an_empty_one(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    """A rejection's reason made only of invisible characters was taken, and the owner read an empty
    reason: it is refused in the empty one's words on every path (the API's two routes, the page)."""
    owner = await add_user(db_url, "owner@example.com")
    await add_user(db_url, "root@example.com", admin=True)
    as_root = await token_of(db_url, await add_user(db_url, "ann@example.com", admin=True))
    jid = await waiting(client, engine, ui_settings, pg, await token_of(db_url, owner), approvers=["admins"])
    r = await client.post(f"/api/jobs/{jid}/reject", json={"reason": INVISIBLE}, headers=as_root)
    assert r.status_code == 422, r.text
    assert r.json()["errors"] == {"reason": "say why the result is rejected"}, r.text
    r = await client.post(f"/api/approvals/{jid}/reject", json={"comment": INVISIBLE}, headers=as_root)
    assert r.status_code == 422 and list(r.json()["errors"]) == ["comment"], r.text
    await switch_to(client, "root@example.com")
    token = csrf_from((await client.get("/admin/approvals")).text)
    r = await client.post(
        f"/approvals/{jid}/reject",
        data={"_csrf_token": token, "reason": INVISIBLE},
        headers={**HX, "HX-Target": f"approval-{jid}"},
    )
    assert r.status_code == 422 and "Say why the result is rejected." in r.text, r.text
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", jid) == "waiting_approval"
