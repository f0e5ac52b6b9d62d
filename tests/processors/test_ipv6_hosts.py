"""An IPv6 address in a message is written as a URL writes it, in brackets: "fe80::1:8080 is Jobdesk
itself" read as one address, and a port could not be told from it. Every message that names a host a job,
a callback or a mail server goes to — at submission (the address policy), when the job runs
(``http.request``, ``email.send``), and the command line's — brackets an IPv6 literal, and leaves a name
or an IPv4 address as it is."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from app.formatting import host_port, url_host
from app.jobs.naming import url_words
from app.processors.addresses import AddressPolicy
from app.processors.email_send import TemporaryMailError
from app.processors.http_request import TemporaryHttpError
from tests.processors.test_processors_email import send
from tests.processors.test_processors_http import call
from tests.support.webkit import add_token, add_user, app_client


def test_the_helpers_bracket_only_ipv6() -> None:
    assert host_port("fe80::1", 8080) == "[fe80::1]:8080"
    assert host_port("127.0.0.1", 25) == "127.0.0.1:25"
    assert host_port("mail.example.com", 587) == "mail.example.com:587"
    assert url_host("[::1]") == "[::1]"
    assert url_words("http://[fe80::1]:8080/hooks/x") == "[fe80::1]/hooks/x"


def test_the_address_policy_brackets_ipv6_hosts(make_settings: Any) -> None:
    policy = AddressPolicy(make_settings(jobdesk_base_url="http://[::1]:8000"))
    private = policy.check_url("http://[fe80::1]:8080/x")
    assert private is not None and private.startswith("[fe80::1] is a local or private address"), private
    own = policy.check_url("http://[::1]:8000/login")
    assert own is not None and own.startswith("[::1]:8000 is Jobdesk itself"), own


def _closed_ipv6_port() -> int:
    with socket.socket(socket.AF_INET6) as s:
        try:
            s.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        port: int = s.getsockname()[1]  # nothing listens here once closed
    return port


async def test_a_refused_connection_names_the_host_in_brackets(make_settings: Any) -> None:
    port = _closed_ipv6_port()
    settings = make_settings(http_request_allowed_hosts=f"[::1]:{port}")
    with pytest.raises(TemporaryHttpError) as err:
        await call(settings, url=f"http://[::1]:{port}/")
    assert "Could not connect to [::1]" in str(err.value)


async def test_an_unreachable_mail_server_is_named_in_brackets(make_settings: Any) -> None:
    port = _closed_ipv6_port()
    settings = make_settings(smtp_host="::1", smtp_port=port)
    with pytest.raises(TemporaryMailError, match=rf"Could not reach the mail server \[::1\]:{port}"):
        await send(settings, to=["a@example.com"], subject="s", body="b")


async def test_submissions_name_an_ipv6_host_in_brackets(make_settings: Any, db_url: str) -> None:
    settings = make_settings(
        jobdesk_base_url="http://[::1]:8123", worker_enabled=False, callback_signing_secret="s"
    )
    user = await add_user(db_url, "bob@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    async with app_client(settings) as client:
        job = {"type": "http.request", "input_data": {"url": "http://[fe80::1]:8080/x"}}
        r = await client.post("/api/jobs", json=job, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["errors"]["input_data.url"].startswith("[fe80::1] is a local or private"), r.text
        hook = {
            "type": "http.request",
            "input_data": {"url": "https://example.com/"},
            "callback_url": "http://[::1]:8123/account",
        }
        r = await client.post("/api/jobs", json=hook, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["errors"]["callback_url"].startswith("[::1]:8123 is Jobdesk itself"), r.text
