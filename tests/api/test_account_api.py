"""``/api/me`` and ``/api/me/tokens`` (the account actions through the JSON API), and the OpenAPI
document: every /api route names its error statuses and its response bodies."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.actions import users as user_actions
from app.db import create_engine
from app.errors import BadInput
from tests.support.webkit import bearer


async def test_me_settings_and_own_tokens_through_the_api(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    ann, auth = await bearer(db_url, "ann@example.com")
    _, bob_auth = await bearer(db_url, "bob@example.com")
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

    assert (await client.post("/api/me/tokens", json={"name": ""}, headers=auth)).status_code == 422
    too_long = await client.post("/api/me/tokens", json={"name": "x", "expires_in_days": 99999}, headers=auth)
    assert too_long.status_code == 422 and "expires_in_days" in too_long.json()["errors"]
    made = await client.post("/api/me/tokens", json={"name": "ci", "expires_in_days": 7}, headers=auth)
    assert made.status_code == 201
    new = made.json()
    assert new["token"].startswith("jd_") and new["prefix"] == new["token"][:10] and new["expires_at"]
    new_auth = {"Authorization": f"Bearer {new['token']}"}
    assert (await client.get("/api/me", headers=new_auth)).json()["email"] == "ann@example.com"

    listed = (await client.get("/api/me/tokens", headers=auth)).json()
    assert [t["name"] for t in listed] == ["ci", "test"]
    assert all("token" not in t and "token_hash" not in t for t in listed)
    assert listed[0]["expired"] is False

    await pg.execute(
        "UPDATE api_tokens SET expires_at = now() - interval '1 minute' WHERE id = $1", new["id"]
    )
    assert (await client.get("/api/me", headers=new_auth)).status_code == 401
    assert (await client.get("/api/me/tokens", headers=auth)).json()[0]["expired"] is True

    # another person cannot revoke it (404, as for an unknown id); its owner can
    assert (await client.delete(f"/api/me/tokens/{new['id']}", headers=bob_auth)).status_code == 404
    assert (await client.delete(f"/api/me/tokens/{new['id']}", headers=auth)).status_code == 204
    assert (await client.delete(f"/api/me/tokens/{new['id']}", headers=auth)).status_code == 404
    assert [t["name"] for t in (await client.get("/api/me/tokens", headers=auth)).json()] == ["test"]
    actions = [
        r["action"]
        for r in await pg.fetch("SELECT action FROM audit_log WHERE user_id = $1 ORDER BY id", ann.id)
    ]
    assert actions == ["account.timezone", "account.theme", "account.token_create", "account.token_revoke"]


async def test_admin_resets_a_password_through_the_api(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    admin, admin_auth = await bearer(db_url, "root@example.com", admin=True)
    ann, ann_auth = await bearer(db_url, "ann@example.com")
    assert (await client.post(f"/api/users/{ann.id}/reset-password", headers=ann_auth)).status_code == 403
    assert (await client.post(f"/api/users/{admin.id}/reset-password", headers=admin_auth)).status_code == 409
    assert (await client.post("/api/users/999999/reset-password", headers=admin_auth)).status_code == 404
    r = await client.post(f"/api/users/{ann.id}/reset-password", headers=admin_auth)
    assert r.status_code == 200
    body = r.json()
    assert body["email"] == "ann@example.com" and len(body["password"]) >= 16
    assert await pg.fetchval("SELECT must_change_password FROM users WHERE id = $1", ann.id)
    # the person's own token is not affected
    assert (await client.get("/api/me", headers=ann_auth)).status_code == 200
    outcomes = [
        r["outcome"]
        for r in await pg.fetch(
            "SELECT outcome FROM audit_log WHERE action = 'user.reset_password' ORDER BY id"
        )
    ]
    assert outcomes == ["refused: it is your own account", "ok"]


def _expected_errors(path: str, method: str, operation: dict[str, Any], admin_paths: set[str]) -> set[str]:
    """The error statuses a route must document, from what it is: every /api route needs a token (401);
    an id in the path can be unknown (404); a body can be too large (413) or wrong (422); an admin
    route refuses others (403)."""
    wanted = {"401"}
    if "{" in path:
        wanted.add("404")
    if "requestBody" in operation:
        wanted |= {"413", "422"}
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
    """Your own token (API), a token an admin issues (actions, as the admin console does): the same rule,
    a 422 on ``name`` rather than a name silently cut or changed, and no token made."""
    ann, auth = await bearer(db_url, "ann@example.com")
    admin, _ = await bearer(db_url, "root@example.com", admin=True)
    before = await pg.fetchval("SELECT count(*) FROM api_tokens")
    r = await client.post("/api/me/tokens", json={"name": name}, headers=auth)
    assert r.status_code == 422, r.text
    engine = create_engine(db_url, pool_size=1)
    try:
        async with engine.begin() as conn:
            with pytest.raises(BadInput) as refused:
                await user_actions.issue_token(conn, admin, ann.id, name)
        if isinstance(name, str) and "\u0000" not in name:  # JSON's own guard answers NUL first
            assert problem in r.json()["errors"]["name"]
        assert problem in (refused.value.errors or {})["name"]
    finally:
        await engine.dispose()
    assert await pg.fetchval("SELECT count(*) FROM api_tokens") == before
