"""A refused action's notice says "Nothing changed" once. The form check's own words ended with
"nothing was done" ("nothing was decided", "nothing changed"), and the answer put "Nothing changed: "
before them: "Nothing changed: this form has no field 'junk'; nothing was done." (app.web.deps.not_taken),
on a job's actions and on the bulk panels of /admin/jobs and /admin/failed alike."""

from __future__ import annotations

import html
import re

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from app.actions.jobs import ACTIONS
from app.settings import Settings
from tests.support.jobsteps import claim, enqueue, finish
from tests.support.webkit import HX, csrf_from, sign_in_as

BULK = {"action": "retry", "type": "noop", "status": "failed"}
GROUP = {"type": "noop", "signature": "boom"}
SAYS_NOTHING = re.compile(r"nothing (was |has )?(done|changed|decided|saved|started)", re.IGNORECASE)


def _notice(page: str) -> str:
    """The text of the answer's sentences that say nothing happened (tags removed)."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    found = [m.start() for m in SAYS_NOTHING.finditer(text)]
    assert found, page[-2000:]
    start = max(0, found[0] - 10)
    return " ".join(text[start : found[-1] + 40].split())


@pytest.fixture
async def paths(
    client: AsyncTestClient, db_url: str, engine: AsyncEngine, ui_settings: Settings, pg: asyncpg.Connection
) -> list[tuple[str, dict[str, str]]]:
    """Every form whose refusal the answer words as "Nothing changed: …", with its own fields."""
    boss = await sign_in_as(client, db_url, "boss@example.com", admin=True)
    waiting = await enqueue(engine, ui_settings, boss.id, "noop", input_data={}, requires_approval=True)
    await claim(engine, waiting)
    await finish(engine, ui_settings, waiting, "completed", result={"ok": True})
    job = f"/jobs/{waiting}"
    return [
        *[(f"{job}/{action}", {"view": "job"}) for action in ACTIONS],
        *[(f"/admin/jobs/{waiting}/{action}", {}) for action in ACTIONS],
        (f"{job}/reschedule", {"date": "2030-01-01", "time": "09:00", "tz": "UTC"}),
        (f"/approvals/{waiting}/approve", {"comment": ""}),
        (f"/approvals/{waiting}/reject", {"reason": "no"}),
        ("/admin/controls/pause", {"type": "noop"}),
        ("/admin/controls/resume", {"type": "noop"}),
        # the bulk panels, which say "Nothing changed: " before the problem (app.web.admin.jobs.bulk_refused)
        *[(url, {**BULK, "scope": "filter"}) for url in ("/admin/jobs/bulk/confirm", "/admin/jobs/bulk")],
        ("/admin/failed/retry/confirm", GROUP),
        ("/admin/failed/retry", {**GROUP, "action": "retry", "scope": "group", "expected": "1"}),
    ]


async def test_every_refused_action_says_nothing_changed_once(
    client: AsyncTestClient, paths: list[tuple[str, dict[str, str]]]
) -> None:
    token = csrf_from((await client.get("/admin")).text)
    said: dict[str, str] = {}
    for url, fields in paths:
        twice = "type" if "type" in fields else "view"  # a field the form has, sent twice
        for extra in ([("junk", "1")], [(twice, "job"), (twice, "job")]):
            pairs = [("_csrf_token", token), *((k, v) for k, v in fields.items() if k != twice), *extra]
            r = await client.post(
                url,
                content="&".join(f"{k}={v}" for k, v in pairs),
                headers={**HX, "Content-Type": "application/x-www-form-urlencoded"},
            )
            assert r.status_code == 422, (url, extra, r.status_code, r.text[-1500:])
            notice = _notice(r.text)
            said[f"{url} {extra[0][0]}"] = notice
            assert len(SAYS_NOTHING.findall(notice)) == 1, (url, notice)
            assert "Nothing changed:" in notice, (url, notice)
            # the problem goes on after the prefix in lower case, on the bulk panels as on a job's actions
            assert re.search(r"Nothing changed: [a-z]", notice), (url, notice)
    assert len(said) == 2 * (2 * len(ACTIONS) + 9)
