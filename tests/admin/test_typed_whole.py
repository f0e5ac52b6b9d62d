"""A value refused on an admin or account form comes back whole, as the schedule forms' do.

The new-user form, the token forms (an admin's for a user, the account page's) and a type's limits cut a
typed value to 1,000 characters when they showed it again beside its error: a 1,500-character token
name was refused as "1,500 characters long" and came back holding its first 1,000, so the second press
was refused as "1,000 characters long" — a different answer to the same mistake, about a value nobody
typed. Each form shows what was typed (``app.web.form_values.as_typed``); the error names its real
length; a second press of what the form shows gets the same answer, never a 500.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import pytest
from litestar.testing import AsyncTestClient

from app.auth import CurrentUser
from tests.support.webkit import HX, add_user, csrf


@dataclass(frozen=True)
class Form:
    path: str
    sent: dict[str, str]
    field: str
    """The control whose value is too long, and whose error is checked."""
    words: str
    """What its error says of the value: its real length, or for a number what the control takes."""
    hx: bool = False


LONG = "T" * 1_500
EMAIL = "e" * 1_488 + "@example.com"


def shown(page: str, field: str) -> str:
    """The value of the page's control named ``field``, unescaped (the first control of that name with
    a value: the form that answered)."""
    for tag in re.findall(r"<input\b[^>]*>", page):
        if re.search(rf'\bname="{re.escape(field)}"', tag):
            value = re.search(r'\bvalue="([^"]*)"', tag)
            if value and value.group(1):
                return html.unescape(value.group(1))
    raise AssertionError(f"no control {field!r} with a value")


async def forms(client: AsyncTestClient, db_url: str) -> list[Form]:
    bob = await add_user(db_url, "bob@example.com")
    return [
        Form("/admin/users", {"email": EMAIL, "password": ""}, "email", "1,500 characters long; at most 254"),
        Form(
            f"/admin/users/{bob.id}/tokens", {"name": LONG}, "name", "at most 100 characters (it has 1,500)"
        ),
        Form("/account/tokens", {"name": LONG, "expires_in_days": ""}, "name", "(it has 1,500)"),
        Form(
            "/account/tokens",
            {"name": "nightly", "expires_in_days": "9" * 1_500},
            "expires_in_days",
            "Give a number of days from 1 to 3650, or leave it empty.",
        ),
        Form(
            "/admin/controls/limits",
            {"type": "noop", "max_running": "9" * 1_500, "max_per_minute": "", "max_running_per_user": ""},
            "max_running",
            "Enter a whole number, or leave it empty for no limit.",
            hx=True,
        ),
    ]


@pytest.mark.parametrize(
    "which", range(5), ids=["new-user", "admin-token", "own-token", "own-token-days", "limits"]
)
async def test_a_refused_over_long_value_comes_back_whole_and_is_refused_the_same_again(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, which: int
) -> None:
    form = (await forms(client, db_url))[which]
    headers = HX if form.hx else {}
    answers = []
    sent = dict(form.sent)
    for _ in range(2):
        r = await client.post(
            form.path,
            data={"_csrf_token": await csrf(client), **sent},
            headers=headers,
            follow_redirects=False,
        )
        assert r.status_code == 422, (r.status_code, r.text[-1500:])
        page = html.unescape(r.text)
        assert form.words in page, page[-3000:]
        assert shown(r.text, form.field) == form.sent[form.field]
        answers.append(re.findall(r'class="field-error"[^>]*>([^<]*)<', r.text))
        sent[form.field] = shown(r.text, form.field)  # the second press sends what the form shows
    assert answers[0] == answers[1] and answers[0], answers  # the same answer to the same value
