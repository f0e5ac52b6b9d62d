"""Where an ``http.request`` job may connect is one rule, read the same at submission and when the job
runs (:meth:`app.processors.addresses.AddressPolicy.problem_before_resolving`): a URL refused when the
job runs, whatever it came by (a ``$ref``, a redirect), is refused at submission when given as text,
in the same words, and never retried; one accepted at submission is not refused later for what was
already known then."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from app.processors import PermanentError
from tests.processors.test_processors_http import call, serving
from tests.support.webkit import add_token, add_user, app_client, csrf, switch_to

_people = itertools.count()
LONG_LABEL = "http://" + "a" * 300 + ".com/"


async def submitted(make_settings: Any, db_url: str, urls: list[str], **overrides: Any) -> list[Any]:
    """Each URL submitted as an ``http.request`` job through the JSON API: the error for
    ``input_data.url`` of a 422, or the status code of any other answer."""
    settings = make_settings(worker_enabled=False, **overrides)
    user = await add_user(db_url, f"urls{next(_people)}@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    out: list[Any] = []
    async with app_client(settings) as client:
        for url in urls:
            resp = await client.post(
                "/api/jobs", json={"type": "http.request", "input_data": {"url": url}}, headers=headers
            )
            out.append(
                resp.json()["errors"]["input_data.url"] if resp.status_code == 422 else resp.status_code
            )
    return out


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (LONG_LABEL, "has a part longer than 63 characters"),
        ("http://example.com:99999/", "Port 99999 is out of range: a web address's port is a number from 1"),
        # Port 0 read as "no port" went to port 80 at submission's check, and to port 0 when it ran.
        ("http://example.com:0/", "Port 0 is out of range: a web address's port is a number from 1"),
        ("https://example.com:0/", "Port 0 is out of range: a web address's port is a number from 1"),
        ("http://a..example.com/", "has an empty part"),
        # Internationalised labels whose Punycode spells nothing: httpx's URL.host raised on them,
        # a 500 at submission.
        ("http://xn--/", "host name xn-- cannot be looked up: it is not a valid host name"),
        ("https://xn--zz.example.com/", "xn--zz.example.com cannot be looked up: it is not a valid host"),
        # Characters no host name has passed the IDNA codec: the job was retried for half an hour.
        (
            "https://exa%20mple.com/",
            "host name exa mple.com cannot be looked up: a host name has no ' ' in it",
        ),
        ("https://exa<mple.com/", "host name exa<mple.com cannot be looked up: a host name has no '<' in it"),
    ],
)
async def test_a_url_no_request_can_reach_is_refused_at_submission_and_fails_for_good_at_run_time(
    make_settings, db_url, url, words
) -> None:
    [refused] = await submitted(make_settings, db_url, [url])
    assert isinstance(refused, str) and words in refused, refused
    # The same URL from a $ref or a redirect: a permanent failure in the same words, not a retry.
    with pytest.raises(PermanentError) as failed:
        await call(make_settings(), url=url)
    assert str(failed.value) == refused


async def test_the_time_limit_is_at_least_a_tenth_of_a_second_on_the_api_and_the_form(
    make_settings, db_url
) -> None:
    """A time limit of 1e-320 seconds was taken and every attempt then failed "within 9.99989e-321
    seconds"; the schema's range holds on every path."""
    settings = make_settings(worker_enabled=False)
    user = await add_user(db_url, "timeout@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    async with app_client(settings) as client:
        for timeout, words in (
            (1e-320, "Must be at least 0.1"),
            (0, "Must be at least 0.1"),
            (301, "at most 300"),
        ):
            resp = await client.post(
                "/api/jobs",
                json={"type": "http.request", "input_data": {"url": "https://x.test/", "timeout": timeout}},
                headers=headers,
            )
            assert resp.status_code == 422, resp.text
            assert words in resp.json()["errors"]["input_data.timeout"]
        ok = await client.post(
            "/api/jobs",
            json={"type": "http.request", "input_data": {"url": "https://x.test/", "timeout": 0.1}},
            headers=headers,
        )
        assert ok.status_code == 201, ok.text
        await switch_to(client, "timeout@example.com")
        form = {
            "_csrf_token": await csrf(client),
            "url": "https://x.test/",
            "method": "GET",
            "timeout": "0." + "0" * 60 + "1",  # a form takes no exponent, and this is no time limit
        }
        page = await client.post("/jobs/new/http.request", data=form, follow_redirects=False)
        assert page.status_code == 422, page.status_code
        assert "Must be at least 0.1" in page.text


@pytest.mark.parametrize(
    ("base", "url", "allowed"),
    [
        # Another name for Jobdesk on loopback is a loopback address, as the job finds when it runs.
        ("http://127.0.0.1:{port}", "http://localhost:{port}/api/ok", False),
        ("http://127.0.0.1:{port}", "http://jobs.localhost:{port}/api/ok", False),
        ("https://jobs.example.com", "http://localhost:{port}/api/ok", False),
        # The base URL's own name: Jobdesk's own API, allowed at both.
        ("http://localhost:{port}", "http://localhost:{port}/api/ok", True),
    ],
)
async def test_names_that_are_always_local_read_alike_at_submission_and_at_run_time(
    make_settings, db_url, base, url, allowed
) -> None:
    """``localhost`` and the names under it always mean this machine: at submission they are read as
    127.0.0.1, the address the job finds when it runs; ``http://localhost:8765/api/me`` was accepted
    and then failed at every attempt while Jobdesk's base URL said 127.0.0.1."""
    with serving() as (own, seen):
        port = own.rsplit(":", 1)[1]
        base, url = base.format(port=port), url.format(port=port)
        [answer] = await submitted(make_settings, db_url, [url], jobdesk_base_url=base)
        settings = make_settings(jobdesk_base_url=base)
        if allowed:
            assert answer == 201, answer
            assert (await call(settings, url=url))[0]["status"] == 200
            assert seen == ["/api/ok"]
            return
        assert isinstance(answer, str), answer
        assert "is 127.0.0.1, a local or private address that jobs may not reach" in answer
        with pytest.raises(PermanentError) as failed:
            await call(settings, url=url)
        assert str(failed.value) == answer
        assert seen == []


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://127.0.0.1:{port}", "http://127.0.0.1.:{port}/api/ok"),
        ("http://localhost:{port}", "http://localhost.:{port}/api/ok"),
        ("http://localhost:{port}", "http://LOCALHOST.:{port}/api/ok"),
        ("http://localhost.:{port}", "http://localhost:{port}/api/ok"),
    ],
)
async def test_a_final_dot_names_the_same_host_at_submission_and_at_run_time(
    make_settings, db_url, base, url
) -> None:
    """``127.0.0.1.`` is the base URL's 127.0.0.1 (README: its name "with or without a final dot"):
    it was refused at submission as a private address, and the system's resolver could not look it up
    when the job ran."""
    with serving() as (own, seen):
        port = own.rsplit(":", 1)[1]
        base, url = base.format(port=port), url.format(port=port)
        assert await submitted(make_settings, db_url, [url], jobdesk_base_url=base) == [201]
        result, _ = await call(make_settings(jobdesk_base_url=base), url=url)
        assert result["status"] == 200
        assert seen == ["/api/ok"]
        # Its pages are still refused under that name.
        [login] = await submitted(
            make_settings, db_url, [url.replace("/api/ok", "/login")], jobdesk_base_url=base
        )
        assert "is Jobdesk itself; jobs may call only its JSON API there" in login


async def test_an_allowed_host_is_allowed_with_or_without_a_final_dot(make_settings, db_url) -> None:
    with serving() as (other, seen):
        port = other.rsplit(":", 1)[1]
        for entry, url in ((f"127.0.0.1.:{port}", other), (f"127.0.0.1:{port}", f"http://127.0.0.1.:{port}")):
            allowed = {"http_request_allowed_hosts": entry, "jobdesk_base_url": "https://jobs.example.com"}
            assert await submitted(make_settings, db_url, [f"{url}/ok"], **allowed) == [201]
            assert (await call(make_settings(**allowed), url=f"{url}/ok"))[0]["status"] == 200
        assert seen == ["/ok", "/ok"]


async def test_a_malformed_international_host_name_is_a_422_on_every_path_that_takes_a_url(
    make_settings, db_url
) -> None:
    """A job's URL, a pipeline step's, a batch row's and a callback's address are read by the one rule
    (:func:`app.processors.addresses.target_problem`); a name like ``xn--`` was a 500 on each, and a
    real international name still passes."""
    settings = make_settings(worker_enabled=False, callback_signing_secret="s")
    user = await add_user(db_url, f"urls{next(_people)}@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    words = "host name xn-- cannot be looked up: it is not a valid host name"
    bad = {"url": "https://xn--/"}
    good = {"url": "https://xn--exmple-cua.com/"}
    async with app_client(settings) as client:
        for path, body, field in (
            ("/api/jobs", {"type": "http.request", "input_data": bad}, "input_data.url"),
            (
                "/api/jobs",
                {"type": "http.request", "input_data": good, "callback_url": "https://xn--/h"},
                "callback_url",
            ),
            (
                "/api/pipelines",
                {"name": "p", "steps": [{"key": "a", "type": "http.request", "input_data": bad}]},
                "steps[0].input_data.url",
            ),
            ("/api/batches", {"type": "http.request", "rows": [good, bad]}, "rows[1].url"),
        ):
            resp = await client.post(path, json=body, headers=headers)
            assert resp.status_code == 422, (path, resp.text)
            assert words in resp.json()["errors"][field], resp.json()
        assert (await client.get("/api/jobs", headers=headers)).json()["items"] == []
        resp = await client.post(
            "/api/jobs",
            json={"type": "http.request", "input_data": good, "callback_url": "https://xn--ls8h.la/h"},
            headers=headers,
        )
        assert resp.status_code == 201, resp.text


async def test_a_url_refused_by_the_address_rule_names_its_field_in_the_apis_detail_as_the_schema_does(
    make_settings, db_url
) -> None:
    """The API's ``detail`` (the one line a client shows) names the field for a host name no lookup can
    find or a private address as for a scheme the schema refuses: it said the words alone."""
    settings = make_settings(worker_enabled=False)
    user = await add_user(db_url, f"urls{next(_people)}@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    async with app_client(settings) as client:
        for url in ("ftp://example.com/", "http://a..example.com/", "http://10.0.0.1/"):
            resp = await client.post(
                "/api/jobs", json={"type": "http.request", "input_data": {"url": url}}, headers=headers
            )
            assert resp.status_code == 422, resp.text
            body = resp.json()
            assert body["detail"] == f"input_data.url: {body['errors']['input_data.url']}", body
