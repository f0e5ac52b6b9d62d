"""A bulk action's ``expected`` (the count its confirm step showed) is a cap, checked by the bulk layer: a
whole number from 1 to the bulk limit, or a 422 naming it in the panel (on every bulk form:
``tests/admin/test_admin_console_actions.py``). It counts nothing itself: a
group of 3 failed jobs posted with ``expected=99`` answered "Retried 3 jobs; 96 skipped because they had
moved on." and audited "3 done, 96 skipped"; ``expected=0`` did nothing and said "0 done, 0 skipped"."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form)
from app.actions import bulk
from app.auth import CurrentUser
from app.errors import BadInput
from app.settings import Settings
from tests.admin.test_admin import post
from tests.support.jobsteps import failed_job

HX = {"HX-Request": "true"}
GROUP = {"type": "test.form", "signature": "boom"}


async def test_a_count_above_what_matched_is_a_cap_and_counts_nothing(
    client: AsyncTestClient, admin: CurrentUser, engine: Any, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    for type_ in ("test.form", "test.step") * 3:
        await failed_job(engine, ui_settings, admin.id, "boom", type_=type_)
    by_filter = {"action": "retry", "scope": "filter", "status": "failed", "type": "test.step"}
    sent = [
        ("/admin/failed/retry", {**GROUP, "expected": "99"}),
        ("/admin/jobs/bulk", {**by_filter, "expected": "500"}),
    ]
    for url, data in sent:
        r = await post(client, url, data, headers=HX)
        assert r.status_code == 200 and "Retried 3 jobs; 0 skipped." in r.text, (url, r.text[:500])
    outcomes = [r["outcome"] for r in await pg.fetch("SELECT outcome FROM audit_log")]
    assert outcomes == ["3 done, 0 skipped"] * 2, outcomes


async def test_jobs_that_moved_on_before_the_action_are_not_counted_from_the_form(
    client: AsyncTestClient, admin: CurrentUser, engine: Any, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    """Skipped are the jobs the action tried that had moved on: never more than it matched."""
    jobs = [await failed_job(engine, ui_settings, admin.id, "boom", type_="test.form") for _ in range(3)]
    r = await post(client, "/admin/failed/retry/confirm", GROUP, headers=HX)
    assert re.search(r'id="bulk-count">3<', r.text), r.text
    await pg.execute("UPDATE jobs SET status = 'cancelled' WHERE id = $1", jobs[0])
    r = await post(client, "/admin/failed/retry", {**GROUP, "expected": "3"}, headers=HX)
    assert r.status_code == 200 and "Retried 2 jobs; 0 skipped." in r.text, r.text
    assert await pg.fetchval("SELECT outcome FROM audit_log") == "2 done, 0 skipped"


def test_the_bulk_layer_holds_the_rule() -> None:
    assert bulk.check_expected(None) is None
    assert bulk.check_expected(1) == 1 and bulk.check_expected(bulk.BULK_MAX) == bulk.BULK_MAX
    for bad in (0, -1, bulk.BULK_MAX + 1, True, "3", 2.0):
        with pytest.raises(BadInput) as caught:
            bulk.check_expected(bad)
        assert "from 1 to 2,000" in caught.value.errors["expected"], bad


async def test_a_bulk_action_over_more_than_the_limit_says_more_jobs_match(
    client: AsyncTestClient,
    admin: CurrentUser,
    engine: Any,
    ui_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """By a filter matching more than the bulk limit it acts on the newest; its answer said "Retried 2,000
    jobs; 0 skipped." as if that were all, and left the rest unmentioned."""
    monkeypatch.setattr(bulk, "BULK_MAX", 2)
    for _ in range(3):
        await failed_job(engine, ui_settings, admin.id, "boom", type_="test.step")
    by_filter = {"action": "retry", "scope": "filter", "status": "failed", "type": "test.step"}
    r = await post(client, "/admin/jobs/bulk", {**by_filter, "expected": "2"}, headers=HX)
    assert r.status_code == 200, r.text[:500]
    assert "Retried 2 jobs; 0 skipped. More jobs match: this acted on the newest 2; run it again" in r.text
