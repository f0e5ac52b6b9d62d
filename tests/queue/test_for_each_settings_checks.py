"""A step run once per item of a parent's result gets the same checks at expansion as a job submitted
with that input: the type's settings check (``http.request``: where jobs may connect) reads the
settings Jobdesk runs with, not the defaults, and every problem of an item is named as the person
reads it elsewhere (``for_each[0].url``)."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import BadInput
from app.jobs import queue
from app.jobs.queue import NewJob
from tests.queue.test_for_each import create, jobs_of, run_claimable, step

BASE = "http://127.0.0.1:8765"
OWN = "is Jobdesk itself; jobs may call only its JSON API there"


def fanout(url: str) -> list[dict[str, Any]]:
    return [
        step("check", "noop", {"columns": [{"name": url}]}),
        step(
            "fe",
            "http.request",
            {"url": {"$item": "name"}},
            depends_on=["check"],
            for_each={"$ref": "check.columns"},
        ),
    ]


async def test_items_from_a_result_pass_the_same_address_check_as_a_submitted_job(
    engine, make_settings, owner, pg
) -> None:
    settings = make_settings(jobdesk_base_url=BASE)
    api = await create(engine, settings, owner, fanout(f"{BASE}/api/me"))
    login = await create(engine, settings, owner, fanout(f"{BASE}/login"))
    await run_claimable(engine, settings)
    # As a job of its own, Jobdesk's own API is accepted and its sign-in page refused.
    async with engine.begin() as conn:
        await queue.enqueue(conn, NewJob("http.request", {"url": f"{BASE}/api/me"}, owner.id), settings)
        with pytest.raises(BadInput) as refused:
            await queue.enqueue(conn, NewJob("http.request", {"url": f"{BASE}/login"}, owner.id), settings)
    assert OWN in refused.value.errors["input_data.url"]
    expanded = await jobs_of(pg, api)
    assert "fe[0]" in expanded, expanded["fe"]["error_message"]
    assert expanded["fe[0]"]["status"] == "queued", expanded["fe[0]"].get("error_message")
    assert expanded["fe[0]"]["input_data"]["url"] == f"{BASE}/api/me"
    failed = (await jobs_of(pg, login))["fe"]
    assert failed["status"] == "failed"
    assert failed["error_message"].startswith(
        f"step 'fe' could not run once per item: for_each[0].url: 127.0.0.1:8765 {OWN}"
    ), failed["error_message"]


async def test_every_problem_of_an_item_from_a_result_names_it_alike(engine, settings, owner, pg) -> None:
    """The schema's words and the settings check's words name the item the same way, as a literal
    list's problems are named (``steps[1].for_each[0].url``) without the step's place."""
    bad_scheme = await create(engine, settings, owner, fanout("ftp://example.com/x"))
    private = await create(engine, settings, owner, fanout("http://10.0.0.1/x"))
    await run_claimable(engine, settings)
    for pid, words in ((bad_scheme, "only http:// and https://"), (private, "a local or private address")):
        message = (await jobs_of(pg, pid))["fe"]["error_message"]
        assert message.startswith("step 'fe' could not run once per item: for_each[0].url: "), message
        assert words in message
