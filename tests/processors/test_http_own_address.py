"""A job may not act as a browser against Jobdesk itself: at Jobdesk's own address (by its name, another
name or loopback address that reaches the same server, or after a redirect) an ``http.request`` job or a
callback may call only the JSON API (``/api/…``, Bearer token, cookies ignored), never a page or a form
such as ``/login`` — otherwise any person could post wrong passwords for someone else's e-mail address
from the worker's address until the sign-in limit locked out everyone signing in from there. Refused at
submission where the URL is given as text (jobs, callbacks, schedules), and when the job runs."""

from __future__ import annotations

from typing import Any

import pytest

from app.processors import PermanentError
from tests.processors.test_processors_http import call, serving
from tests.support.webkit import add_token, add_user, app_client

OWN = "is Jobdesk itself; jobs may call only its JSON API there"


async def test_jobdesks_pages_are_refused_when_the_job_runs_by_every_name_and_hop(make_settings) -> None:
    with serving() as (own, own_seen), serving() as (other, _):
        port = own.rsplit(":", 1)[1]
        settings = make_settings(
            jobdesk_base_url=own,
            http_request_allowed_hosts=[other.removeprefix("http://"), f"localhost:{port}"],
        )
        for url in (
            f"{own}/login",
            f"{own}/",
            f"{own}/account",
            f"http://localhost:{port}/login",
            f"http://LOCALHOST.:{port}/login",
            f"{own}/api/../login",
            f"{own}/api/%2e%2e/login",
            f"{own}/api%2f..%2flogin",
            f"{other}/redirect-to?{own}/login",
        ):
            with pytest.raises(PermanentError, match=OWN):
                await call(settings, url=url)
        with pytest.raises(PermanentError, match=OWN):
            await call(
                settings,
                method="POST",
                url=f"http://localhost:{port}/login",
                body_type="text",
                body="email=dave@example.com&password=wrong",
            )
        assert own_seen == []
        assert (await call(settings, url=f"{own}/api/ok"))[0]["status"] == 200
        assert own_seen == ["/api/ok"]


async def test_jobdesks_pages_are_refused_at_submission_on_every_path(make_settings, db_url) -> None:
    """The JSON API's job, callback and schedule submissions each answer 422 naming the field."""
    base = "http://127.0.0.1:8123"
    settings = make_settings(jobdesk_base_url=base, worker_enabled=False, callback_signing_secret="s")
    user = await add_user(db_url, "bob@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    admin = await add_user(db_url, "admin@example.com", admin=True)
    admin_headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    async with app_client(settings) as client:

        async def submit(path: str, body: dict[str, Any], as_admin: bool = False) -> dict[str, Any]:
            resp = await client.post(path, json=body, headers=admin_headers if as_admin else headers)
            assert resp.status_code == 422, resp.text
            return {"detail": resp.json().get("detail"), **dict(resp.json().get("errors") or {})}

        job = {"type": "http.request", "input_data": {"url": f"{base}/login", "method": "GET"}}
        assert OWN in (await submit("/api/jobs", job))["input_data.url"]
        hook = {
            "type": "http.request",
            "input_data": {"url": "https://example.com/"},
            "callback_url": "http://localhost:8123/account",
        }
        errors = await submit("/api/jobs", hook)
        assert OWN in errors.get("callback_url", ""), errors
        schedule = {"name": "s", "cron": "* * * * *", **job}
        assert OWN in (await submit("/api/schedules", schedule, as_admin=True))["input_data.url"]
        fine = await client.post(
            "/api/jobs",
            json={"type": "http.request", "input_data": {"url": f"{base}/api/jobs"}},
            headers=headers,
        )
        assert fine.status_code == 201, fine.text
