"""The input edge: a NUL character or a lone surrogate in any query parameter or form field, JSON nested
a thousand levels deep, or an id beyond its column's range answers a 4xx naming the field — never a
500. The walks below enumerate the app's own routes and the forms its pages show, so a route or form
added later is covered without editing this file."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlencode

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app.actions.selection import FILTER_FIELDS
from app.server import create_app
from app.settings import Settings
from app.web.input_guard import FORM_CHECKED, json_depth
from tests.support.jobsteps import claim, enqueue, failed_job, finish
from tests.support.webkit import add_token, add_user, csrf_from, login

NUL = "a\x00b"
SKIPPED_PREFIXES = ("/static", "/schema")


@dataclass
class Walk:
    client: AsyncTestClient
    app: Litestar
    bearer: dict[str, str]
    job_ids: list[str] = field(default_factory=list)


@pytest.fixture
async def walk(make_settings: Any, db_url: str, engine: AsyncEngine) -> AsyncIterator[Walk]:
    settings: Settings = make_settings(worker_enabled=False)
    boss = await add_user(db_url, "boss@example.com", admin=True)
    bearer = {"Authorization": f"Bearer {await add_token(db_url, boss.id)}"}
    # jobs in the states whose pages show forms: failed, waiting for approval, scheduled
    failed = await failed_job(engine, settings, boss.id, "boom", type_="noop", input_data={})
    approval = await enqueue(engine, settings, boss.id, "noop", input_data={}, requires_approval=True)
    await claim(engine, approval)
    await finish(engine, settings, approval, "completed", result={"ok": True})
    later = datetime.now(UTC) + timedelta(days=1)
    scheduled = await enqueue(engine, settings, boss.id, "noop", input_data={}, run_at=later)
    app = create_app(settings)
    async with AsyncTestClient(app=app, base_url="http://testserver.local") as client:
        assert (await login(client, "boss@example.com")).status_code == 303
        yield Walk(client, app, bearer, [str(failed), str(approval), str(scheduled)])


def _routes(app: Litestar, method: str) -> list[tuple[str, Any]]:
    out = []
    for route in app.routes:
        if route.path.startswith(SKIPPED_PREFIXES):
            continue
        for handler in getattr(route, "route_handlers", []):
            if method in handler.http_methods:
                out.append((route.path, handler))
    return out


def _fill(path: str) -> str:
    return re.sub(r"\{(\w+):(\w+)\}", lambda m: "1" if m.group(2) == "int" else "x", path)


def _query_names(path: str, handler: Any) -> set[str]:
    names = {"unknown_param"}
    for name, fd in handler.parsed_fn_signature.parameters.items():
        kind = type(fd.kwarg_definition).__name__
        if kind == "QueryParameter" or (kind == "ParameterKwarg" and fd.kwarg_definition.query):
            names.add(fd.kwarg_definition.name or fd.kwarg_definition.query or name)
    if path == "/admin/jobs":
        names |= set(FILTER_FIELDS)  # read from the query string by the filter parser
    return names


_SHOWN_NUL = re.compile(r'class="(?:field-error|notice notice-error)"[^>]*>(?:<[^>]+>)*[^<]*NUL character')


def _names_the_field(r: Any, name: str) -> bool:
    if r.headers.get("content-type", "").startswith("application/json"):
        return name in (r.json().get("errors") or {})
    return f"<strong>{name}</strong>" in r.text


async def test_every_get_route_refuses_a_nul_in_each_query_parameter_naming_it(walk: Walk) -> None:
    checked = 0
    for path, handler in _routes(walk.app, "GET"):
        url = _fill(path)
        headers = walk.bearer if url.startswith("/api/") else {}
        for name in sorted(_query_names(path, handler)):
            for bad in ("a%00b", "%ED%A0%80", "%FF"):
                r = await walk.client.get(f"{url}?{name}={bad}", headers=headers, follow_redirects=False)
                assert r.status_code == 422, (url, name, bad, r.status_code, r.text[:300])
                assert _names_the_field(r, name), (url, name, r.text[:300])
                # an address saves nothing, whatever it holds: its refusal does not say nothing was saved
                assert "nothing was saved" not in r.text, (url, name, bad, r.text[:300])
                checked += 1
    assert checked > 60


# --- forms ------------------------------------------------------------------------------------------------


@dataclass
class Form:
    action: str
    multipart: bool
    fields: dict[str, str] = field(default_factory=dict)


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[Form] = []
        self._current: Form | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and a.get("method", "get").lower() == "post":
            self._current = Form(a.get("action", ""), "multipart" in a.get("enctype", ""))
            self.forms.append(self._current)
        elif tag in ("input", "textarea", "select") and self._current is not None and a.get("name"):
            if a.get("type") not in ("file", "submit", "button"):
                self._current.fields.setdefault(a["name"], a.get("value", "x") or "x")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def forms_in(html: str) -> list[Form]:
    parser = _Forms()
    parser.feed(html)
    return [f for f in parser.forms if f.action.startswith("/") and not f.action.startswith("/api/")]


async def _pages(walk: Walk) -> list[str]:
    """Every page a person reaches from the start page and the admin console, the jobs' own pages, and the
    confirmation forms that bulk actions answer with."""
    c = walk.client
    paths = ["/", "/jobs", "/pipelines", "/admin", "/admin/health", "/admin/users", "/admin/schedules"]
    paths += ["/admin/jobs", "/admin/failed", "/admin/alerts", "/admin/audit"]
    paths += [f"/jobs/{j}" for j in walk.job_ids]
    home = (await c.get("/")).text + (await c.get("/pipelines")).text
    paths += sorted(set(re.findall(r'href="(/(?:jobs|pipelines)/new/[^"?]+)"', home)))
    pages = [(await c.get(p)).text for p in paths]
    token = csrf_from(pages[0])
    for url, data in (
        ("/admin/jobs/bulk", {"action": "cancel", "scope": "filter", "status": "queued"}),
        ("/admin/failed/retry/confirm", {"type": "noop", "signature": "boom"}),
    ):
        pages.append((await c.post(url, data={**data, "_csrf_token": token})).text)
    return pages


def _route_for(app: Litestar, action: str) -> Any:
    for path, handler in _routes(app, "POST"):
        pattern = re.sub(r"\\\{\w+:\w+\\\}", "[^/]+", re.escape(path))
        if re.fullmatch(pattern, action):
            return path, handler
    raise AssertionError(f"no route for the form action {action}")


async def test_every_post_form_refuses_a_nul_in_each_field_naming_it(walk: Walk) -> None:
    c, covered, checked = walk.client, set(), 0
    forms = {(f.action, tuple(sorted(f.fields))): f for page in await _pages(walk) for f in forms_in(page)}
    for form in forms.values():
        path, handler = _route_for(walk.app, form.action)
        covered.add(path)
        for name in form.fields:
            if name == "_csrf_token":
                continue
            token = csrf_from((await c.get("/jobs")).text)
            data = {**form.fields, name: NUL, "_csrf_token": token}
            files = {"unused": ("x.txt", b"x")} if form.multipart else None
            r = await c.post(form.action, data=data, files=files, follow_redirects=False)
            assert r.status_code == 422, (form.action, name, r.status_code, r.text[:300])
            if handler.opt.get(FORM_CHECKED):
                # beside the field, or (a hidden field) in the form's error notice
                assert _SHOWN_NUL.search(r.text), (form.action, name, r.text[:3000])
            else:
                assert _names_the_field(r, name), (form.action, name, r.text[:300])
            checked += 1
    # the walk reached the forms named in the issue: sign-out, user creation, token name, reject reason,
    # bulk confirm, a job's start form
    for path in ("/logout", "/admin/users", "/admin/users/{user_id:int}/tokens", "/admin/jobs/bulk/confirm"):
        assert path in covered, path
    assert any("reject" in p for p in covered) and "/jobs/new/{type_name:str}" in covered
    assert checked > 30


async def test_the_sign_in_form_refuses_a_nul_in_the_email_naming_it(walk: Walk) -> None:
    walk.client.cookies.clear()
    page = await walk.client.get("/login")
    data = {"email": "ann\x00@example.com", "password": "x", "_csrf_token": csrf_from(page.text)}
    r = await walk.client.post("/login", data=data)
    assert r.status_code == 422 and re.search(r'id="e-email" class="field-error">[^<]*NUL character', r.text)
    assert 'value="ann\x00@example.com"' in r.text  # what was typed, kept


# --- JSON and numbers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [1000, 5000])
async def test_json_nested_a_thousand_levels_is_a_422_naming_the_body(walk: Walk, levels: int) -> None:
    deep = "[" * levels + "]" * levels
    for url, body in (
        ("/api/jobs", '{"type": "noop", "input_data": {"x": ' + deep + "}}"),
        (
            "/api/pipelines",
            '{"name": "p", "steps": [{"key": "a", "type": "noop", "input_data": ' + deep + "}]}",
        ),
    ):
        headers = {**walk.bearer, "content-type": "application/json"}
        r = await walk.client.post(url, content=body, headers=headers)
        assert r.status_code == 422, (url, r.text[:300])
        assert "body" in r.json()["errors"] and "nested" in r.json()["detail"]


async def test_json_of_ordinary_depth_is_accepted(walk: Walk) -> None:
    nested: Any = {"leaf": "[{"}
    for _ in range(25):  # 52 levels with the body's own object (job inputs allow 64)
        nested = {"x": [nested]}
    r = await walk.client.post("/api/jobs", json={"type": "noop", "input_data": nested}, headers=walk.bearer)
    assert r.status_code == 201, r.text[:300]


def test_json_depth_ignores_brackets_inside_strings() -> None:
    assert json_depth(b'{"a": "' + b"[" * 500 + b'"}') == 1
    assert json_depth(b'["\\"' + b"[" * 200 + b'"]', stop_at=1) <= 1
    assert json_depth(b"[" * 150 + b"]" * 150) > 100


async def test_an_api_user_id_beyond_int4_is_a_422_naming_it(walk: Walk) -> None:
    for value in ("2147483648", "99999999999999999999", "0"):
        r = await walk.client.get(f"/api/jobs?user_id={value}", headers=walk.bearer)
        assert r.status_code == 422 and "user_id" in r.json()["errors"], (value, r.text)
    r = await walk.client.get("/api/jobs?user_id=2147483647", headers=walk.bearer)
    assert r.status_code == 200


async def test_unknown_ids_in_paths_are_404_not_500(walk: Walk) -> None:
    for url in ("/jobs/" + str(uuid.uuid4()), "/jobs/%00", "/pipelines/%00", "/files/%00"):
        assert (await walk.client.get(url)).status_code == 404, url


def _multipart(header: bytes, data: bytes) -> tuple[bytes, dict[str, str]]:
    body = b"--XyZ\r\n" + header + b"\r\n\r\n" + data + b"\r\n--XyZ--\r\n"
    return body, {"content-type": "multipart/form-data; boundary=XyZ"}


UNREADABLE_PARTS = {
    "Latin-1 text": (b'Content-Disposition: form-data; name="title"', b"caf\xe9"),
    "a file without a file name": (
        b'Content-Disposition: form-data; name="file"; filename=""\r\nContent-Type: image/png',
        b"\x89PNG\r\n",
    ),
    "an unknown charset": (
        b'Content-Disposition: form-data; name="title"\r\nContent-Type: text/plain; charset=bogus',
        b"x",
    ),
}


@pytest.mark.parametrize("part", UNREADABLE_PARTS, ids=list(UNREADABLE_PARTS))
async def test_a_multipart_field_that_is_not_text_is_a_422_on_every_path_not_a_500(
    walk: Walk, part: str
) -> None:
    body, headers = _multipart(*UNREADABLE_PARTS[part])
    token = {"x-csrftoken": csrf_from((await walk.client.get("/jobs")).text)}
    for url, extra in (
        ("/api/files", walk.bearer),  # the JSON API, by token
        ("/admin/controls/pause", token),  # forms, the CSRF token in the header (the check reads no form)
        ("/jobs/new/noop", token),  # forms that check their own fields
        ("/batches/new/noop", token),
        ("/admin/users", token),
        ("/admin/schedules/new", token),
        ("/admin/controls/pause", {}),  # the CSRF check looks for its token in the form
        ("/jobs/new/noop", {}),
        ("/login", {}),
    ):
        r = await walk.client.post(url, content=body, headers={**headers, **extra})
        assert r.status_code == 422, (url, r.status_code, r.text[:300])
        assert "not UTF-8 text" in r.text, (url, r.text[:300])
    # a route that reads JSON does not read a form at all
    r = await walk.client.post("/api/jobs", content=body, headers={**headers, **walk.bearer})
    assert r.status_code == 415 and "send JSON (Content-Type: application/json)" in r.text, r.text


BAD_NAMES = {
    "a file name in Latin-1": (
        b'Content-Disposition: form-data; name="file"; filename="caf\xe9.txt"\r\nContent-Type: text/plain',
        "the name of the file sent as 'file' is not UTF-8 text: rename the file",
    ),
    "a field name in Latin-1": (
        b'Content-Disposition: form-data; name="caf\xe9"',
        "a field's name in this form is not UTF-8 text",
    ),
}


@pytest.mark.parametrize("part", BAD_NAMES, ids=list(BAD_NAMES))
async def test_a_part_header_that_is_not_utf8_is_a_422_naming_the_problem(walk: Walk, part: str) -> None:
    """The multipart parser cannot decode such a header, and Litestar answered its error with a bare 400
    "Invalid multipart/form-data": nothing said that the file's name was the trouble."""
    header, words = BAD_NAMES[part]
    body, headers = _multipart(header, b"hello")
    token = {"x-csrftoken": csrf_from((await walk.client.get("/jobs")).text)}
    for url, extra in (
        ("/api/files", walk.bearer),
        ("/jobs/new/noop", token),
        ("/batches/new/noop", token),
        ("/admin/controls/pause", {}),
    ):
        r = await walk.client.post(url, content=body, headers={**headers, **extra})
        assert r.status_code == 422, (url, r.status_code, r.text[:300])
        assert words in html.unescape(r.text), (url, r.text[:300])


# --- a form's shape ---------------------------------------------------------------------------------------

UNKNOWN = "zzz_unknown"
REPEATABLE = {"ids", "id", "files"}
"""Fields a form sends more than once by design (ticked rows, ticked notices, many files)."""


async def _shape_pages(walk: Walk) -> list[str]:
    """:func:`_pages` and the pages with the other forms: the account, notifications, a batch, schedules."""
    c = walk.client
    created = await c.post("/api/schedules", json={"cron": "0 9 * * *", "type": "noop"}, headers=walk.bearer)
    assert created.status_code == 201, created.text
    paths = [
        "/account",
        "/notifications",
        "/batches/new/http.request",
        "/admin/schedules/new?target=type:noop",
    ]
    paths.append(f"/admin/schedules/{created.json()['id']}/edit")
    return [*await _pages(walk), *[(await c.get(p)).text for p in paths]]


async def _post_pairs(c: AsyncTestClient, action: str, pairs: list[tuple[str, str]]) -> Any:
    token = csrf_from((await c.get("/jobs")).text)
    body = urlencode([*pairs, ("_csrf_token", token)])
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return await c.post(action, content=body, headers=headers, follow_redirects=False)


def _refused(r: Any, words: str) -> bool:
    return r.status_code == 422 and words in r.text


async def test_every_post_form_refuses_a_field_it_has_not_and_one_sent_twice(walk: Walk) -> None:
    """Each form read its fields one by one, so a field it has not was dropped without a word and of one
    sent twice the first was taken; every form of the web UI now refuses both, saying which (422)."""
    c, covered, wrong = walk.client, set(), []
    forms = {
        (f.action, tuple(sorted(f.fields))): f for page in await _shape_pages(walk) for f in forms_in(page)
    }
    for form in sorted(forms.values(), key=lambda f: f.action == "/logout"):  # signing out ends the walk
        path, _ = _route_for(walk.app, form.action)
        covered.add(path)
        pairs = [(k, v) for k, v in form.fields.items() if k != "_csrf_token"]
        r = await _post_pairs(c, form.action, [*pairs, (UNKNOWN, "1")])
        if not _refused(r, f"no field &#39;{UNKNOWN}&#39;"):
            wrong.append((form.action, UNKNOWN, r.status_code))
        once = [(k, v) for k, v in pairs if k not in REPEATABLE]
        if once:
            r = await _post_pairs(c, form.action, [*pairs, once[0]])
            if not _refused(r, f"&#39;{once[0][0]}&#39; more than once"):
                wrong.append((form.action, once[0][0], r.status_code))
    walk.client.cookies.clear()  # the sign-in form, signed out
    pairs = [("email", "boss@example.com"), ("password", "x"), ("next", "/"), ("timezone", "UTC")]
    for extra, words in (((UNKNOWN, "1"), f"no field &#39;{UNKNOWN}&#39;"), (pairs[0], "more than once")):
        token = csrf_from((await c.get("/login")).text)
        body = urlencode([*pairs, extra, ("_csrf_token", token)])
        r = await c.post(
            "/login", content=body, headers={"content-type": "application/x-www-form-urlencoded"}
        )
        if not _refused(r, words):
            wrong.append(("/login", extra[0], r.status_code))
    assert not wrong, f"{len(wrong)} not refused: {wrong}"
    for path in (
        "/account/password",
        "/account/timezone",
        "/account/theme",
        "/account/tokens",
        "/admin/users",
        "/admin/users/{user_id:int}/tokens",
        "/admin/failed/retry/confirm",
        "/admin/schedules/new",
        "/admin/schedules/{schedule_id:str}/edit",
        "/batches/new/{type_name:str}",
        "/notifications/email",
        "/logout",
    ):
        assert path in covered, path
    assert len(covered) > 25, sorted(covered)
