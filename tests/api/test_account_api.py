"""``/api/me`` and ``/api/me/tokens`` (the account actions through the JSON API), and the OpenAPI
document: every /api route names its error statuses and its response bodies."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app import tokens as tokens_module
from app.actions import account as account_actions
from app.actions import users as user_actions
from app.db import create_engine
from app.errors import BadInput, Forbidden
from tests.support.webkit import bearer, csrf, sign_in_as, switch_to


async def test_me_settings_and_own_tokens_through_the_api(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann, auth = await bearer(db_url, "ann@example.com")
    me = (await client.get("/api/me", headers=auth)).json()
    assert me == {
        "id": ann.id,
        "email": "ann@example.com",
        "is_admin": False,
        "timezone": "UTC",
        "theme": "auto",
    }

    bad = await client.put("/api/me", json={"timezone": "Nowhere/Land"}, headers=auth)
    assert bad.status_code == 422 and "timezone" in bad.json()["errors"]
    assert (await client.put("/api/me", json={"theme": "sepia"}, headers=auth)).status_code == 422
    changed = await client.put(
        "/api/me", json={"timezone": "Europe/Copenhagen", "theme": "dark"}, headers=auth
    )
    assert changed.status_code == 200
    assert changed.json()["timezone"] == "Europe/Copenhagen" and changed.json()["theme"] == "dark"
    assert (await client.get("/api/me", headers=auth)).json()["timezone"] == "Europe/Copenhagen"
    # the same values again change nothing, so the trail records nothing (it read "dark to dark")
    again = await client.put("/api/me", json={"timezone": "Europe/Copenhagen", "theme": "dark"}, headers=auth)
    assert again.status_code == 200 and again.json()["theme"] == "dark", again.text

    listed = (await client.get("/api/me/tokens", headers=auth)).json()
    assert [t["name"] for t in listed] == ["test"]
    assert all("token" not in t and "token_hash" not in t for t in listed)
    assert listed[0]["expired"] is False
    actions = [
        r["action"]
        for r in await pg.fetch("SELECT action FROM audit_log WHERE user_id = $1 ORDER BY id", ann.id)
    ]
    assert actions == ["account.timezone", "account.theme"]


async def test_a_token_can_neither_mint_nor_revoke_tokens(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """A stolen token that expires tomorrow must not become lasting access: it may not mint a token
    (which would not expire with it) nor revoke its owner's tokens (the minted one revoking the stolen
    one, so that revoking the stolen token ends nothing). The account page, signed in, still does both."""
    ann = await sign_in_as(client, db_url, "ann@example.com")
    made = await client.post(
        "/account/tokens", data={"_csrf_token": await csrf(client), "name": "ci", "expires_in_days": "1"}
    )
    assert made.status_code == 200
    stolen = re.search(r'id="secret-value" class="secret-value">(jd_[^<]+)<', made.text).group(1)  # type: ignore[union-attr]
    auth = {"Authorization": f"Bearer {stolen}"}
    stolen_id = await pg.fetchval("SELECT id FROM api_tokens WHERE name = 'ci'")
    before = await pg.fetchval("SELECT count(*) FROM api_tokens")

    for body in ({"name": "forever"}, {"name": "forever", "expires_in_days": 3650}, {"name": ""}):
        minted = await client.post("/api/me/tokens", json=body, headers=auth)
        assert minted.status_code == 403, minted.text
        assert minted.json()["detail"] == tokens_module.TOKENS_FROM_THE_PAGE
        assert "/account" in minted.json()["detail"]
    for token_id in (stolen_id, stolen_id + 1000):
        revoked = await client.delete(f"/api/me/tokens/{token_id}", headers=auth)
        assert revoked.status_code == 403 and revoked.json()["detail"] == tokens_module.TOKENS_FROM_THE_PAGE
    assert await pg.fetchval("SELECT count(*) FROM api_tokens") == before
    assert await pg.fetchval("SELECT count(*) FROM api_tokens WHERE revoked_at IS NOT NULL") == 0
    # listing stays readable through the API
    assert [t["name"] for t in (await client.get("/api/me/tokens", headers=auth)).json()] == ["ci"]

    # the same rule in the actions, for any path that acts with a token's owner (an admin's too)
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            with_token = replace(ann, token_id=stolen_id)
            with pytest.raises(Forbidden):
                await account_actions.create_token(conn, with_token, "forever")
            with pytest.raises(Forbidden):
                await account_actions.revoke_token(conn, with_token, stolen_id)
            root, _ = await bearer(db_url, "root@example.com", admin=True)
            with pytest.raises(Forbidden):
                await user_actions.issue_token(conn, replace(root, token_id=1), ann.id, "forever")
            with pytest.raises(Forbidden):
                await user_actions.revoke_token(conn, replace(root, token_id=1), stolen_id)
    finally:
        await engine.dispose()

    # the account page, signed in, revokes it: the stolen token stops at once
    page_revoke = await client.post(
        f"/account/tokens/{stolen_id}/revoke",
        data={"_csrf_token": await csrf(client)},
        follow_redirects=False,
    )
    assert page_revoke.status_code == 303
    assert (await client.get("/api/me", headers=auth)).status_code == 401
    entries = [tuple(r) for r in await pg.fetch("SELECT action, outcome FROM audit_log ORDER BY id")]
    assert [a for a, _ in entries] == [
        "account.token_create",
        "token.create",
        "token.revoke",
        "account.token_revoke",
    ]
    # an admin's refused token actions are on the audit trail (a person's own are not admin actions)
    assert [o.split(":")[0] for _, o in entries] == ["ok", "refused", "refused", "ok"]


async def test_a_token_cannot_reset_a_password(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    """A one-time password is a credential for another account: an admin's stolen token must not obtain
    one (for another admin's account either), or the access would outlast the token's revocation. The
    API route answers 403 saying where to do it, the action refuses any actor with a token, and the
    users page, signed in, still resets."""
    admin, admin_auth = await bearer(db_url, "root@example.com", admin=True)
    other_admin, _ = await bearer(db_url, "ops@example.com", admin=True)
    ann, ann_auth = await bearer(db_url, "ann@example.com")
    hashes = dict(await pg.fetch("SELECT id, password_hash FROM users"))
    assert (await client.post(f"/api/users/{ann.id}/reset-password", headers=ann_auth)).status_code == 403
    for target in (ann.id, other_admin.id, admin.id, 999999):
        r = await client.post(f"/api/users/{target}/reset-password", headers=admin_auth)
        assert r.status_code == 403, r.text
        assert r.json()["detail"] == tokens_module.RESETS_FROM_THE_PAGE
        assert "/admin/users" in r.json()["detail"] and "password" not in {*r.json()}
    assert dict(await pg.fetch("SELECT id, password_hash FROM users")) == hashes
    assert not await pg.fetchval("SELECT bool_or(must_change_password) FROM users")
    # each refusal of an admin's token is on the audit trail (the unknown id as it was asked for)
    refused = await pg.fetch(
        "SELECT target_ids, outcome FROM audit_log WHERE action = 'user.reset_password' ORDER BY id"
    )
    assert [r["target_ids"] for r in refused] == [
        f'["{i}"]' for i in (ann.id, other_admin.id, admin.id, 999999)
    ]
    assert all(r["outcome"].startswith("refused: ") for r in refused), refused

    # the same rule in the action, for any path that acts with an admin who holds a token
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            with pytest.raises(Forbidden, match="API token cannot reset"):
                await user_actions.reset_password(conn, replace(admin, token_id=1), ann.id)
    finally:
        await engine.dispose()

    # the users page, signed in with a password, resets; the person's own token is not affected
    await switch_to(client, "root@example.com")
    page = await client.post(
        f"/admin/users/{ann.id}/reset-password", data={"_csrf_token": await csrf(client)}
    )
    assert page.status_code == 200 and 'id="secret-value"' in page.text
    assert await pg.fetchval("SELECT must_change_password FROM users WHERE id = $1", ann.id)
    assert (await client.get("/api/me", headers=ann_auth)).status_code == 200
    outcomes = [
        r["outcome"]
        for r in await pg.fetch(
            "SELECT outcome FROM audit_log WHERE action = 'user.reset_password' ORDER BY id"
        )
    ]
    assert outcomes == ["refused: " + tokens_module.RESETS_FROM_THE_PAGE] * 5 + ["ok"]


def _expected_errors(path: str, method: str, operation: dict[str, Any], admin_paths: set[str]) -> set[str]:
    """The error statuses a route must document, from what it is: every /api route needs a token (401);
    an id in the path can be unknown (404); a body can be too large (413) or wrong (422), and a JSON
    body sent in another type is refused (415, :func:`app.web.input_guard.refuse_not_json`); an admin
    route refuses others (403)."""
    wanted = {"401"}
    if "{" in path:
        wanted.add("404")
    if "requestBody" in operation:
        wanted |= {"413", "422"}
        if "application/json" in operation["requestBody"].get("content", {}):
            wanted.add("415")
    if (path, method) in admin_paths:
        wanted.add("403")
    return wanted


async def test_openapi_documents_every_api_routes_errors_and_bodies(client: AsyncTestClient) -> None:
    swagger = await client.get("/schema")
    assert swagger.status_code == 200 and "swagger-ui" in swagger.text.lower()  # linked from /account
    doc = (await client.get("/schema/openapi.json")).json()
    admin_routes = {
        ("/api/jobs/bulk", "post"),
        ("/api/schedules", "get"),
        ("/api/schedules", "post"),
        ("/api/users/{user_id}/unlock", "post"),
        ("/api/users/{user_id}/reset-password", "post"),
        ("/api/users/{user_id}/usage", "get"),
        ("/api/job-types/{job_type}/pause", "post"),
        ("/api/job-types/{job_type}/limits", "put"),
    }
    problems: list[str] = []
    seen = 0
    for path, item in doc["paths"].items():
        if not path.startswith("/api/"):
            continue
        for method, op in item.items():
            if method not in {"get", "put", "post", "delete", "patch"}:
                continue
            seen += 1
            responses = op["responses"]
            for status in sorted(_expected_errors(path, method, op, admin_routes) - set(responses)):
                problems.append(f"{method.upper()} {path}: {status} not documented")
            for status, response in responses.items():
                if status.startswith(("4", "5")) and status != "400":
                    schema = response.get("content", {}).get("application/json", {}).get("schema")
                    if schema != {"$ref": "#/components/schemas/ErrorBody"}:
                        problems.append(f"{method.upper()} {path}: {status} has no error body")
                    if not response.get("description"):
                        problems.append(f"{method.upper()} {path}: {status} has no description")
                if status.startswith("2") and status != "204":
                    if "schema" not in response.get("content", {}).get("application/json", {}):
                        if not path.startswith("/api/files/"):  # a download answers with the file's bytes
                            problems.append(f"{method.upper()} {path}: {status} has no response schema")
            if "``" in (op.get("description") or ""):
                problems.append(f"{method.upper()} {path}: reStructuredText literal in the description")
    assert seen >= 40
    assert not problems, "\n".join(problems)
    error_body = doc["components"]["schemas"]["ErrorBody"]
    assert set(error_body["properties"]) == {"detail", "errors"}
    assert doc["paths"]["/api/me/tokens"]["post"]["description"].startswith("Create an API token")


@pytest.mark.parametrize(
    ("name", "problem"),
    [("x" * 101, "at most 100 characters"), ("nul\u0000here", "NUL"), (7, "must be text")],
)
async def test_a_token_name_that_cannot_be_kept_as_given_is_refused_on_every_path(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, name: Any, problem: str
) -> None:
    """Your own token (the account page's action), a token an admin issues (as the admin console does):
    the same rule, a 422 on ``name`` rather than a name silently cut or changed, and no token made."""
    ann, _ = await bearer(db_url, "ann@example.com")
    admin, _ = await bearer(db_url, "root@example.com", admin=True)
    before = await pg.fetchval("SELECT count(*) FROM api_tokens")
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            with pytest.raises(BadInput) as own:
                await account_actions.create_token(conn, ann, name)
            with pytest.raises(BadInput) as refused:
                await user_actions.issue_token(conn, admin, ann.id, name)
        assert problem in (own.value.errors or {})["name"]
        assert problem in (refused.value.errors or {})["name"]
    finally:
        await engine.dispose()
    assert await pg.fetchval("SELECT count(*) FROM api_tokens") == before
