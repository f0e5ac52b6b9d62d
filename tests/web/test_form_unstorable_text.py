"""Every form that shows its own errors answers text that cannot be stored — a NUL character, a lone
surrogate (in a urlencoded body its bytes ``%ED%A0%80``, which are not UTF-8; in a JSON field's text an
escaped ``\\ud800``), bytes that are not UTF-8 — with the form again and the problem beside the field,
what was typed kept, through one rule (:func:`app.web.input_guard.form_problems`). The lone surrogate and
the bytes that are not UTF-8 were a bare 422 page on the job and pipeline forms, the typed input lost."""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import quote

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form and test.steps)
from app.web.input_guard import UNREADABLE_FORM_MESSAGE
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


# --- every other form that shows its own errors, driven one table ------------------------------------

RAW_BYTES = {"nul": b"\x00", "lone surrogate": b"\xed\xa0\x80", "not utf-8": b"\xff"}
"""The same kinds of text as :data:`UNSTORABLE`, as the bytes a multipart part carries."""

SHEET = b"Web address,Verb\nhttp://jobs.test:9/a,GET\n"


@dataclass
class Form:
    """One form: where it is posted (after ``setup`` signed in and read what it needs), its fields as
    typed, the fields corrupted in turn, and for each a text of another field the answer must keep."""

    setup: Callable[[AsyncTestClient, str], Awaitable[tuple[str, dict[str, str]]]]
    bad: tuple[str, ...]
    kept: dict[str, str] = dataclasses.field(default_factory=dict)
    """bad field → a text the answer shows when that field is the bad one (another field as typed)."""
    error_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    """bad field → the id of the element its error is in (``e-<field>`` otherwise)."""
    multipart: bool = False
    htmx: bool = False


async def _login_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    page = await client.get("/login")
    fields = {"_csrf_token": csrf_from(page.text), "email": "ann@example.com", "password": "secret pass"}
    return "/login", {**fields, "next": "/jobs", "timezone": "Europe/Paris"}


async def _account(client: AsyncTestClient, db_url: str) -> str:
    await sign_in_as(client, db_url, "ann@example.com")
    return csrf_from((await client.get("/account")).text)


async def _password_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    token = await _account(client, db_url)
    fields = {"current_password": "x", "password": "a new long password", "password_repeat": "again"}
    return "/account/password", {"_csrf_token": token, **fields}


async def _timezone_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    return "/account/timezone", {"_csrf_token": await _account(client, db_url), "timezone": "Europe/Paris"}


async def _theme_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    return "/account/theme", {"_csrf_token": await _account(client, db_url), "theme": "dark"}


async def _token_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    token = await _account(client, db_url)
    return "/account/tokens", {"_csrf_token": token, "name": "Nightly export", "expires_in_days": "30"}


async def _admin(client: AsyncTestClient, db_url: str) -> str:
    await sign_in_as(client, db_url, "boss@example.com", admin=True)
    return csrf_from((await client.get("/admin/users")).text)


async def _admin_token_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    token = await _admin(client, db_url)
    page = await client.get("/admin/users")
    user_id = re.search(r'id="issue-token-(\d+)"', page.text).group(1)  # type: ignore[union-attr]
    return f"/admin/users/{user_id}/tokens", {"_csrf_token": token, "name": "Deploy script"}


async def _limits_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    fields = {"type": "noop", "max_running": "4", "max_per_minute": "57", "max_running_per_user": "2"}
    return "/admin/controls/limits", {"_csrf_token": await _admin(client, db_url), **fields}


async def _sheet_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/batches/new/http.request")
    return "/batches/new/http.request", {
        "_csrf_token": csrf_from(page.text),
        "_form_key": _form_key(page.text),
    }


async def _mapping_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    url, fields = await _sheet_form(client, db_url)
    read = await client.post(url, data=fields, files={"sheet": ("a.csv", SHEET, "text/csv")})
    assert read.status_code == 200, read.text[:500]
    sheet_id = re.search(r'name="sheet_id" value="([^"]+)"', read.text).group(1)  # type: ignore[union-attr]
    mapping = {"sheet_id": sheet_id, "map.url": "0", "map.method": "1", "_name": "Weekly checks"}
    return url, {**fields, "_form_key": _form_key(read.text), **mapping}


async def _job_form(client: AsyncTestClient, db_url: str) -> tuple[str, dict[str, str]]:
    await sign_in_as(client, db_url, "ann@example.com")
    page = await client.get("/jobs/new/test.form")
    fields = {"_csrf_token": csrf_from(page.text), "_form_key": _form_key(page.text), "copies": "3"}
    return "/jobs/new/test.form", {**fields, "name": "Ann", "notes": "Kept notes", "_title": "Mine"}


FORMS = {
    "job (multipart)": Form(
        _job_form,
        ("name", "notes", "_title"),
        kept=dict.fromkeys(("name", "notes", "_title"), 'value="3"'),
        multipart=True,
    ),
    "sign-in": Form(_login_form, ("email", "password"), kept={"password": 'value="ann@example.com"'}),
    "password": Form(_password_form, ("current_password", "password", "password_repeat")),
    "time zone": Form(_timezone_form, ("timezone",)),
    "colours": Form(_theme_form, ("theme",)),
    "own API token": Form(
        _token_form,
        ("name", "expires_in_days"),
        kept={"name": 'value="30"', "expires_in_days": 'value="Nightly export"'},
    ),
    "admin's token issue": Form(_admin_token_form, ("name",)),
    "limits": Form(
        _limits_form,
        ("max_running", "max_per_minute", "max_running_per_user"),
        kept={
            "max_running": 'value="57"',
            "max_per_minute": 'value="4"',
            "max_running_per_user": 'value="57"',
        },
        htmx=True,
    ),
    "spreadsheet": Form(_sheet_form, ("_form_key",), error_ids={"_form_key": "form-errors"}, multipart=True),
    "spreadsheet's columns": Form(
        _mapping_form,
        ("_name", "map.url"),
        kept={"_name": '<option value="1" selected>Verb</option>', "map.url": 'value="Weekly checks"'},
        multipart=True,
    ),
}


def _multipart_body(fields: dict[str, str], bad_field: str, raw: bytes) -> tuple[bytes, dict[str, str]]:
    parts = []
    for name, value in fields.items():
        data = b"a" + raw + value.encode() if name == bad_field else value.encode()
        parts.append(b'--XyZ\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n' + data)
    body = b"\r\n".join(parts) + b"\r\n--XyZ--\r\n"
    return body, {"content-type": "multipart/form-data; boundary=XyZ"}


def _error_at(html: str, element_id: str) -> str:
    found = re.search(rf'id="{re.escape(element_id)}"[^>]*>(?:<p><strong>)?([^<]*)<', html)
    return found.group(1) if found else ""


@pytest.mark.parametrize("kind", list(UNSTORABLE))
@pytest.mark.parametrize("name", list(FORMS))
async def test_unstorable_text_in_every_other_form_is_an_error_beside_the_field(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection, name: str, kind: str
) -> None:
    """Sign-in, the account's forms (password, time zone, colours, API token), the admin's token issue,
    the limits per type and the batch forms (multipart: the part's bytes as sent; bytes that are not
    UTF-8 there make the whole form unreadable, a 422 that says so)."""
    form = FORMS[name]
    raw, words = UNSTORABLE[kind]
    url, fields = await form.setup(client, db_url)
    before = await pg.fetchval("SELECT count(*) FROM audit_log WHERE outcome NOT LIKE 'refused: %'")
    for bad in form.bad:
        if form.multipart and kind != "nul":
            # Litestar's reader decodes every part in one loop: bytes that are not UTF-8 make the whole
            # form unreadable, a 422 that says so (browsers send UTF-8 and no lone surrogates).
            content, headers = _multipart_body(fields, bad, RAW_BYTES[kind])
            sent = await client.post(url, content=content, headers=headers, follow_redirects=False)
            assert sent.status_code == 422, (bad, sent.status_code, sent.text[:300])
            assert UNREADABLE_FORM_MESSAGE in html.unescape(sent.text), (bad, sent.text[:3000])
            continue
        if form.multipart:
            content, headers = _multipart_body(fields, bad, RAW_BYTES[kind])
        else:
            content, headers = _body(fields, bad, raw).encode(), dict(URLENCODED)
        if form.htmx:
            headers["HX-Request"] = "true"
        sent = await client.post(url, content=content, headers=headers, follow_redirects=False)
        assert sent.status_code == 422, (bad, sent.status_code, sent.text[:300])
        shown = _error_at(sent.text, form.error_ids.get(bad, f"e-{bad}"))
        assert words.lower() in shown.lower(), (bad, shown, sent.text[:3000])
        if bad in form.kept:
            assert form.kept[bad] in sent.text, (bad, sent.text[:5000])
    assert (
        await pg.fetchval("SELECT count(*) FROM audit_log WHERE outcome NOT LIKE 'refused: %'") == before
    )  # nothing was changed
    assert await pg.fetchval("SELECT count(*) FROM batches") == 0
