"""Digits ``int`` cannot read ("²", "①": ``str.isdigit`` is true for them) and runs of digits longer than
``int`` takes (4,300), in every place Jobdesk reads a number out of text that is not a form's: each is
refused or passed over with its own message, never a ``ValueError`` (a 500, a job failing on an error
nobody can act on, a setting refused in Python's words)."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from app.cron import check_cron
from app.digits import whole
from app.errors import BadInput
from app.jobs.approvals import link_problem, link_token
from app.jobs.graph import resolve_refs
from app.jobs.types import PermanentError
from app.processors.addresses import AddressPolicy
from app.processors.images import _natural
from app.settings import Settings
from app.web.display import user_ids_in

UNREADABLE = ["²", "①", "1²", "٣", "５", "9" * 5000, ""]
"""Not plain ASCII digits, or too many of them (the empty text too)."""


@pytest.mark.parametrize("text", UNREADABLE)
def test_whole_takes_ascii_digits_only(text: str) -> None:
    assert whole(text) is None


def test_whole_reads_plain_digits() -> None:
    assert (whole("0"), whole("0042"), whole("9" * 30)) == (0, 42, int("9" * 30))
    assert (whole(" 1"), whole("+1"), whole("-1"), whole("9" * 31)) == (None, None, None, None)


@pytest.mark.parametrize("digits", ["²", "²³", "9" * 5000])
def test_a_signed_approval_link_with_such_digits_is_not_valid(digits: str) -> None:
    job_id = uuid.uuid4()
    signature = link_token("s3cret", job_id, now=0).partition(".")[2]
    assert link_problem("s3cret", job_id, f"{digits}.{signature}") == "This approval link is not valid."


@pytest.mark.parametrize("signature", ["é", "\ud800", "ｓｉｇ", "\u0000"])
def test_a_signed_approval_link_whose_signature_is_not_ascii_is_not_valid(signature: str) -> None:
    """hmac.compare_digest raises TypeError for text that is not ASCII: it was a 500, for anyone signed in."""
    job_id = uuid.uuid4()
    expires = link_token("s3cret", job_id, now=0).partition(".")[0]
    assert link_problem("s3cret", job_id, f"{expires}.{signature}") == "This approval link is not valid."


def test_a_signed_approval_link_with_its_expiry_written_otherwise_is_not_valid() -> None:
    """The expiry as it was signed: ``0123`` is not ``123`` (a token altered, if harmlessly)."""
    job_id = uuid.uuid4()
    token = link_token("s3cret", job_id, now=4_000_000_000)
    assert link_problem("s3cret", job_id, token, now=4_000_000_000) is None
    assert (
        link_problem("s3cret", job_id, "0" + token, now=4_000_000_000) == "This approval link is not valid."
    )


@pytest.mark.parametrize("step", ["²", "①", "9" * 5000])
def test_a_cron_step_or_day_with_such_digits_is_refused_in_words(step: str) -> None:
    with pytest.raises(BadInput) as refused:
        check_cron(f"*/{step} * * * *")
    assert "the step after '/' in the minute field must be a whole number" in refused.value.detail
    with pytest.raises(BadInput):
        check_cron(f"0 0 {step} 2 *")
    with pytest.raises(BadInput):
        check_cron(f"{step}-1 * * * *")


@pytest.mark.parametrize("index", ["²", "①", "9" * 5000])
def test_a_ref_into_a_list_with_such_an_index_names_the_missing_result(index: str) -> None:
    with pytest.raises(PermanentError, match="has no such result"):
        resolve_refs({"$ref": f"a.items.{index}"}, {"a": {"items": [1, 2, 3]}})
    assert resolve_refs({"$ref": "a.items.2"}, {"a": {"items": [1, 2, 3]}}) == 3


def test_a_metrics_address_with_such_a_port_is_refused_in_words() -> None:
    with pytest.raises(ValidationError, match="expected host:port"):
        Settings(worker_metrics_addr="127.0.0.1:²")


@pytest.mark.parametrize("port", ["²", "①", "9" * 5000, "0", "65536", "x"])
def test_an_allowed_host_with_such_a_port_is_refused_in_words(port: str) -> None:
    with pytest.raises(ValidationError, match="the port after the host must be a number from 1 to 65535"):
        Settings(http_request_allowed_hosts=f"api.example:8443,hooks.example:{port}")
    policy = AddressPolicy(Settings(http_request_allowed_hosts="api.example:8443,[::1]:9000,Other.example."))
    assert policy.host_ports == {("api.example", 8443), ("::1", 9000)}
    assert "other.example" in policy.hosts


def test_file_names_with_such_digits_sort() -> None:
    names = ["b2", "a10", "a²", "a" + "9" * 5000, "a01", "a2"]
    assert [n[:4] for n in sorted(names, key=_natural)] == ["a01", "a2", "a10", "a999", "a²", "b2"]


def test_an_actor_with_such_digits_is_no_user() -> None:
    assert user_ids_in([{"actor": "user:²"}, {"actor": "user:7"}, {"actor": "user:" + "9" * 5000}]) == [7]
