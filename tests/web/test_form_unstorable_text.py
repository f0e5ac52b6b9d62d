"""Every form that shows its own errors answers text that cannot be stored — a NUL character, a lone
surrogate (in a urlencoded body its bytes ``%ED%A0%80``, which are not UTF-8; in a JSON field's text an
escaped ``\\ud800``), bytes that are not UTF-8 — with the form again and the problem beside the field,
what was typed kept, through one rule (:func:`app.web.input_guard.form_problems`). The lone surrogate and
the bytes that are not UTF-8 were a bare 422 page on the job and pipeline forms, the typed input lost."""

from __future__ import annotations

import re
from urllib.parse import quote

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form and test.steps)
from tests.support.webkit import csrf_from, sign_in_as

URLENCODED = {"content-type": "application/x-www-form-urlencoded"}
UNSTORABLE = {
    "nul": ("%00", "Contains a NUL character"),
    "lone surrogate": ("%ED%A0%80", "Contains a lone surrogate"),
    "not utf-8": ("%FF", "Is not UTF-8 text"),
}


def _body(fields: dict[str, str], bad_field: str, raw: str) -> str:
    parts = [f"{quote(k)}={quote(v)}" for k, v in fields.items() if k != bad_field]
    return "&".join([*parts, f"{quote(bad_field)}=a{raw}{quote(fields.get(bad_field, ''))}"])


def _error_beside(html: str, field: str) -> str:
    found = re.search(rf'id="e-{re.escape(field)}" class="field-error"[^>]*>([^<]*)<', html)
    return found.group(1) if found else ""


def _form_key(html: str) -> str:
    return re.search(r'name="_form_key" value="([^"]+)"', html).group(1)  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", list(UNSTORABLE))
async def test_unstorable_text_in_the_job_and_pipeline_forms_is_an_error_beside_the_field(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, kind: str
) -> None:
    raw, words = UNSTORABLE[kind]
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    typed = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "copies": "3"}
    for field in ("name", "notes", "_title"):
        sent = await client.post(
            "/jobs/new/test.form",
            content=_body({**typed, "name": "Ann", "notes": "Kept notes", "_title": "Mine"}, field, raw),
            headers=URLENCODED,
            follow_redirects=False,
        )
        assert sent.status_code == 422, (field, sent.status_code, sent.text[:300])
        assert "<h1>Every field</h1>" in sent.text, (field, sent.text[:500])
        assert _error_beside(sent.text, field).startswith(words), (field, _error_beside(sent.text, field))
        assert 'value="3"' in sent.text, field
    page = await client.get("/pipelines/new/test.steps")
    steps = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "seconds": "7"}
    for field in ("title", "_title"):
        sent = await client.post(
            "/pipelines/new/test.steps",
            content=_body({**steps, "title": "Weekly", "_title": "Mine"}, field, raw),
            headers=URLENCODED,
            follow_redirects=False,
        )
        assert sent.status_code == 422, (field, sent.status_code, sent.text[:300])
        assert "Start the pipeline" in sent.text and 'value="7"' in sent.text, field
        assert _error_beside(sent.text, field).startswith(words), (field, sent.text[:2000])
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0


async def test_an_escaped_lone_surrogate_in_a_json_field_is_an_error_beside_it(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    form = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "name": "Ann"}
    sent = await client.post(
        "/jobs/new/test.form", data={**form, "extra": '{"\\ud800": 1}'}, follow_redirects=False
    )
    assert sent.status_code == 422 and "<h1>Every field</h1>" in sent.text, sent.text[:300]
    assert _error_beside(sent.text, "extra"), sent.text[:3000]
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


@pytest.mark.parametrize("kind", list(UNSTORABLE))
async def test_unstorable_text_in_the_admin_forms_is_an_error_beside_the_field(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, kind: str
) -> None:
    raw, words = UNSTORABLE[kind]
    await sign_in_as(client, db_url, "boss@example.com", admin=True)
    page = await client.get("/admin/users")
    user = {"_csrf_token": csrf_from(page.text), "email": "new@example.com", "password": "long enough pass"}
    for field in ("email", "password"):
        sent = await client.post("/admin/users", content=_body(user, field, raw), headers=URLENCODED)
        assert sent.status_code == 422, (field, sent.status_code)
        assert _error_beside(sent.text, field).startswith(words), (field, sent.text[:3000])
    assert await pg.fetchval("SELECT count(*) FROM users WHERE email LIKE 'new%'") == 0
    page = await client.get("/admin/schedules/new?target=type:test.form")
    schedule = {
        "_csrf_token": csrf_from(page.text),
        "_target": "type:test.form",
        "_cron": "0 9 * * *",
        "_timezone": "UTC",
        "_name": "Daily",
        "name": "Ann",
    }
    for field in ("_cron", "_name", "name"):
        sent = await client.post(
            "/admin/schedules/new",
            content=_body(schedule, field, raw),
            headers=URLENCODED,
            follow_redirects=False,
        )
        assert sent.status_code == 422, (field, sent.status_code)
        assert _error_beside(sent.text, field).startswith(words), (field, sent.text[:3000])
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
