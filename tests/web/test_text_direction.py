"""Direction controls in user text stay inside it: a job name holding U+202E (right-to-left override)
reversed the words after it in the same cell — the type label on /admin/jobs, "(koohbew) tseuqer bew a
dneS" — and names also come from file names, so refusing the character where a title is typed is not
enough. Every value a page outputs closes the directions it opens (``app.formatting.balanced``, applied
to every ``{{ … }}``); the stylesheet sets every inline element apart (checked in the browser)."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.formatting import balanced, isolated
from tests.support.jobsteps import claim, failed_job, finish
from tests.support.webkit import Site

RLO = "\u202e"
NAME = RLO + "Send a web request (webhook)"


def closed(page: str, shown: str = NAME) -> None:
    """The page opens no direction it does not close (our own words hold none: each value must close
    what it opens), and the value is on it."""
    assert shown in page, f"{shown!r} is not on the page"
    assert balanced(page) == page, "a direction control in a value reaches past its end"


async def test_a_name_with_a_direction_override_is_closed_in_every_listing(
    site: Site, engine: AsyncEngine, make_settings: Any
) -> None:
    client, settings = site.client, make_settings(worker_enabled=False)
    r = await client.post(
        "/api/jobs",
        json={"type": "noop", "input_data": {}, "title": NAME, "tags": [NAME]},
        headers=site.bearer,
    )
    assert r.status_code == 201, r.text
    job = r.json()["id"]
    boss = (await client.get("/api/me", headers=site.bearer)).json()["id"]
    error = f"{RLO}could not reach the host"
    failed = await failed_job(engine, settings, boss, error, title=NAME)
    steps = [{"key": "ok", "type": "noop", "input_data": {}, "requires_approval": True, "title": NAME}]
    r = await client.post("/api/pipelines", json={"name": NAME, "steps": steps}, headers=site.bearer)
    assert r.status_code == 201, r.text
    pipeline, step = r.json()["id"], r.json()["steps"][0]["job_id"]
    await finish(engine, settings, await claim(engine, uuid.UUID(step)), "completed", result={})
    for path in (
        "/jobs",
        f"/jobs/{job}",
        f"/jobs/{failed}",
        f"/pipelines/{pipeline}",
        "/admin/jobs",
        "/admin/approvals",
        "/approvals",
        "/notifications",
    ):
        page = await client.get(path)
        assert page.status_code == 200, path
        try:
            closed(page.text)
        except AssertionError as e:
            raise AssertionError(f"{path}: {e}") from None
    closed((await client.get("/admin/failed")).text, error)
    closed((await client.get(f"/jobs/{failed}")).text, error)


def test_balanced_closes_what_a_value_opens_and_drops_what_it_does_not() -> None:
    assert balanced("plain") == "plain"
    assert balanced(RLO + "abc") == RLO + "abc\u202c"
    assert balanced("a\u202cb\u2069c") == "abc"  # closers of nothing it opened
    assert balanced("\u2067x" + RLO + "y") == "\u2067x" + RLO + "y\u202c\u2069"
    assert balanced("x\u2067a\u2069b") == "x\u2067a\u2069b"
    for value in ("\u2069" + RLO, "\u2067\u202c", RLO + "\u2067\u202c\u2069"):
        assert balanced(balanced(value)) == balanced(value)
    assert isolated("plain") == "plain"  # nothing in it can turn: kept as typed
    assert isolated(RLO + "abc") == "\u2068" + RLO + "abc\u202c\u2069"
    assert isolated("שלום") == "\u2068שלום\u2069"


def test_balanced_takes_linear_time_on_many_unmatched_closers() -> None:
    """Many embeddings followed by as many PDIs (none of which closes anything): a job input of this
    shape, rendered on its page, held the event loop for tens of seconds when each PDI searched the
    open embeddings for an isolate."""
    n = 30_000
    value = "\u202a" * n + "\u2069" * n
    started = time.perf_counter()
    out = balanced(value)
    took = time.perf_counter() - started
    assert out == "\u202a" * n + "\u202c" * n
    assert took < 1.5, f"balanced took {took:.1f} s for {2 * n} characters"


async def test_edit_and_resubmit_fills_the_form_with_the_input_as_it_was_sent(
    site: Site, engine: AsyncEngine, make_settings: Any
) -> None:
    """A form field's value is the person's data, not text beside other words: a control shows it in its
    own box, so a direction it opens reaches nothing else. Balanced like any output, "Edit and resubmit"
    filled the form with a PDF appended and the closers it did not open dropped, and resubmitting sent
    other text than the job's (a web request's body, say)."""
    settings = make_settings(worker_enabled=False)
    boss = (await site.client.get("/api/me", headers=site.bearer)).json()["id"]
    name, notes = "a\u202cb" + RLO + "c", "x\u2069y\u2067z"
    jid = await failed_job(engine, settings, boss, "Boom", input_data={"name": name, "notes": notes})
    form = (await site.client.get(f"/jobs/new/test.form?from={jid}")).text
    assert re.search(f'name="name"[^>]*value="{name}"', form), "the name was changed"
    assert re.search(f'name="notes"[^>]*>{notes}</textarea>', form), "the notes were changed"


async def test_every_form_field_shows_back_what_was_typed(site: Site) -> None:
    """The same for every field a page fills with what was sent: a filter, a search, an address, kept in a
    hidden field for the next page. Balanced, the field sent back other text than was typed (a filter
    matching other names, a closer appended to a search)."""
    typed = "a\u202cb" + RLO + "c"
    pages = {
        f"/admin/audit?user={typed}": "user",
        f"/jobs?q={typed}": "q",
        f"/admin/jobs?q={typed}": "q",
    }
    for url, field in pages.items():
        page = (await site.client.get(url)).text
        values = re.findall(f'name="{field}"[^>]*value="([^"]*)"', page)
        assert values and all(v == typed for v in values), (url, values)
