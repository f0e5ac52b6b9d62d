"""A schedule's target that names nothing it can start — ``?target=http.request`` (a type without its
``type:`` kind), an unknown type or template, or nonsense — is a 4xx whose page says in words what is
wrong with it, as "There is no job type called 'x'." says elsewhere, not only "Choose a job type or a
pipeline template."; the form posted with such a ``_target`` says the same."""

from __future__ import annotations

import html
import re

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from tests.admin.test_admin import post


def _said(page: str) -> str:
    """The error shown beside the target picker, as text."""
    found = re.search(r'id="e-_target"[^>]*>(.*?)</', page, re.S)
    assert found is not None, page[:3000]
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


@pytest.mark.parametrize(
    ("target", "words"),
    [
        (
            "http.request",
            "'http.request' is written without its kind: a schedule's target is type:<job type> or "
            "template:<pipeline template>, here type:http.request. Choose it below.",
        ),
        ("type:no.such", "There is no job type called 'no.such'. Choose a job type or a pipeline template."),
        (
            "template:no.such",
            "There is no pipeline template called 'no.such'. Choose a job type or a pipeline template.",
        ),
        ("nonsense", "'nonsense' is not a job type or a pipeline template that a schedule can start"),
        ("job:email.send", "'job:email.send' is not a job type or a pipeline template"),
    ],
)
async def test_an_unusable_target_says_what_is_wrong_with_it(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection, target: str, words: str
) -> None:
    r = await client.get("/admin/schedules/new", params={"target": target})
    assert r.status_code == 404
    assert _said(r.text).startswith(words), _said(r.text)
    assert 'id="pick-target"' in r.text  # the picker, to choose one
    sent = await post(client, "/admin/schedules/new", {"_target": target, "_cron": "0 9 * * *"})
    assert sent.status_code == 422
    assert _said(sent.text).startswith(words), _said(sent.text)
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 0
