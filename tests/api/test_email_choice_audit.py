"""A person's e-mail choice for notices is an account change like the others: each path that changes it
(the account page's form, the ``/notifications`` page's, ``PUT /api/me/notifications``) goes through
``app.actions.account.set_email_notifications`` and leaves one audit entry; a choice already so leaves
none."""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient

from tests.support.webkit import add_token, csrf, sign_in_as


async def _entries(pg: asyncpg.Connection, user_id: int) -> list[tuple[str, str, str | None]]:
    rows = await pg.fetch(
        "SELECT action, detail::text AS detail, ip FROM audit_log WHERE user_id = $1 ORDER BY id", user_id
    )
    return [(r["action"], r["detail"], r["ip"]) for r in rows]


async def test_every_path_that_changes_the_email_choice_audits_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann = await sign_in_as(client, db_url, "ann@example.com")
    token = {"Authorization": f"Bearer {await add_token(db_url, ann.id)}"}
    choice = "SELECT email_notifications FROM users WHERE id = $1"

    # the API turns it on, then again (already on: not written, not audited)
    for _ in range(2):
        r = await client.put("/api/me/notifications", json={"email": True}, headers=token)
        assert r.status_code == 200 and r.json()["email"] is True
    assert await pg.fetchval(choice, ann.id) is True
    # the account page's form turns it off (an unticked checkbox sends no ``email``)
    r = await client.post(
        "/notifications/email",
        data={"_csrf_token": await csrf(client), "next": "/account"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == "/account"
    assert await pg.fetchval(choice, ann.id) is False
    # the /notifications page's form turns it on
    r = await client.post(
        "/notifications/email",
        data={"_csrf_token": await csrf(client), "next": "/notifications", "email": "on"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert await pg.fetchval(choice, ann.id) is True

    entries = await _entries(pg, ann.id)
    assert [(a, d) for a, d, _ in entries] == [
        ("account.email_notifications", '{"to": true, "from": false}'),
        ("account.email_notifications", '{"to": false, "from": true}'),
        ("account.email_notifications", '{"to": true, "from": false}'),
    ]
    assert all(ip for _, _, ip in entries)

    # the trail shows it in words
    admin = await sign_in_as(client, db_url, "root@example.com", admin=True)
    assert admin.is_admin
    page = (await client.get("/admin/audit")).text
    assert "Changed their own e-mail choice for notices" in page
