"""Every state-changing request is all-or-nothing when its database connection dies at any of its
statements, its COMMIT included, on the JSON API and the browser's forms: the cut request is answered
with its success (it was kept) or a 503 (never a 500), and its repeat (the same idempotency key or form
key) ends with exactly one effect and an answer below 500.

The app's database URL goes through :class:`tests.support.splitproxy.SplitProxy`, which cuts the
connection at the Nth round trip of the request: before the statement reaches the server (the server
rolls the transaction back) or after (the server ran it, its answer is lost: at the COMMIT, the change
was kept while the client saw its connection die). Each action is first run uncut to count its round
trips; then, for each N up to that count and both kinds of cut, on a fresh target: the cut request, the
invariants on the database, the repeat, and exactly one effect.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers the test job types)
from app.settings import Settings
from tests.support.jobsteps import claim, finish
from tests.support.splitproxy import SplitProxy, cut_plan
from tests.support.webkit import add_token, add_user, app_client, csrf, switch_to

# A job whose status is not the one its last status-changing event names was changed without its event
# (or the event written without its change).
JOBS_OUT_OF_STEP_WITH_EVENTS = """
    SELECT j.id, j.status, e.to_status
    FROM jobs j
    LEFT JOIN LATERAL (
        SELECT to_status FROM job_events WHERE job_id = j.id AND to_status IS NOT NULL ORDER BY id DESC LIMIT 1
    ) e ON true
    WHERE e.to_status IS DISTINCT FROM j.status
"""


MAX_ROUND_TRIPS = 60


@dataclass
class Split:
    client: AsyncTestClient
    pg: asyncpg.Connection
    proxy: SplitProxy
    root: dict[str, str]
    """An admin's token headers."""
    owner: dict[str, str]
    """A person's (not an admin) token headers."""
    owner_id: int

    async def consistent(self, where: str) -> None:
        out = await self.pg.fetch(JOBS_OUT_OF_STEP_WITH_EVENTS)
        assert not out, f"{where}: jobs out of step with their events: {[dict(r) for r in out]}"

    async def job(self, type_: str = "test.step", **body: Any) -> str:
        """A job of the owner's, made through an uncut request."""
        r = await self.client.post("/api/jobs", json={"type": type_, **body}, headers=self.owner)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def failed_job(self) -> str:
        job = await self.job()
        await self.pg.execute(
            "UPDATE jobs SET status = 'failed', is_active = false, attempts = 1, completed_at = now(), "
            "error_message = 'boom' WHERE id = $1",
            uuid.UUID(job),
        )
        await self.pg.execute(
            "INSERT INTO job_events (job_id, kind, from_status, to_status, actor) "
            "VALUES ($1, 'failed', 'queued', 'failed', 'test')",
            uuid.UUID(job),
        )
        return job


@pytest.fixture
async def split(
    make_settings: Any, db_url: str, pg: asyncpg.Connection, long_run: bool
) -> AsyncIterator[Split]:
    target = make_url(db_url)
    proxy = SplitProxy(target.host or "127.0.0.1", target.port or 5432, every_cut=long_run).start()
    root = await add_user(db_url, "root@example.com", admin=True)
    owner = await add_user(db_url, "owner@example.com")
    root_h = {"Authorization": f"Bearer {await add_token(db_url, root.id)}"}
    owner_h = {"Authorization": f"Bearer {await add_token(db_url, owner.id)}"}
    settings = make_settings(worker_enabled=False, database_url=proxy.url(db_url))
    try:
        async with app_client(settings, fresh=True) as client:
            yield Split(client, pg, proxy, root_h, owner_h, owner.id)
    finally:
        proxy.close()


Setup = Callable[[Split], Awaitable[Any]]
Request = Callable[[Split, Any], Awaitable[Any]]
Effects = Callable[[Split, Any], Awaitable[int]]


async def cut_everywhere(split: Split, setup: Setup, request: Request, effects: Effects) -> None:
    """``request`` on a fresh ``setup`` each time, cut at each of its round trips (after the statement;
    before it, at the first, or at each with ``--long``: :func:`cut_plan`): the invariants hold after
    the cut (``effects`` is 0 or 1), and a repeat of the request leaves exactly one effect and answers
    with no 5xx. A request makes more round trips on a connection new to the pool (asyncpg reads the
    server's types, SQLAlchemy its settings): N goes up until a request ends before its Nth, so the
    last statement (the COMMIT) is cut too."""
    target = await setup(split)
    first = await request(split, target)
    assert first.status_code < 400, first.text
    assert await effects(split, target) == 1
    for after, most in cut_plan(split.proxy.every_cut, MAX_ROUND_TRIPS):
        for n in range(1, most + 1):
            where = f"cut {'after' if after else 'before'} round trip {n}"
            target = await setup(split)
            split.proxy.arm(n, after=after)
            answer = await asyncio.wait_for(request(split, target), 30)
            count, cut = split.proxy.disarm()
            if not cut:
                assert answer.status_code < 400, f"{where} (none: {count} round trips): {answer.text}"
                assert await effects(split, target) == 1, where
                break
            where += f" ({split.proxy.cut_statement!r})"
            assert answer.status_code < 400 or answer.status_code == 503, f"{where}: {answer.text}"
            await split.consistent(where)
            done = await effects(split, target)
            assert done in (0, 1), f"{where}: {done} effects"
            if answer.status_code < 400:
                assert done == 1, f"{where}: answered {answer.status_code} with nothing done"
            if answer.status_code == 503 and done == 1:
                assert "Nothing was saved" not in answer.text, f"{where}: kept, and answered {answer.text}"
            again = await asyncio.wait_for(request(split, target), 30)
            assert again.status_code < 500, f"{where}, then the repeat: {again.text}"
            assert await effects(split, target) == 1, f"{where}, then the repeat"
            await split.consistent(f"{where}, then the repeat")
        else:
            if most == MAX_ROUND_TRIPS:
                raise AssertionError(f"still cut at round trip {MAX_ROUND_TRIPS}")


async def _audited(split: Split, action: str, target: Any) -> int:
    return int(
        await split.pg.fetchval(
            "SELECT count(*) FROM audit_log WHERE action = $1 AND outcome = 'ok' AND target_ids ? $2",
            action,
            str(target),
        )
    )


async def _events(split: Split, job: str, to_status: str) -> int:
    return int(
        await split.pg.fetchval(
            "SELECT count(*) FROM job_events WHERE job_id = $1 AND to_status = $2", uuid.UUID(job), to_status
        )
    )


async def test_a_submission_with_its_idempotency_key(split: Split) -> None:
    async def setup(s: Split) -> tuple[str, str]:
        return f"key-{uuid.uuid4()}", await s.job()

    async def request(s: Split, target: tuple[str, str]) -> Any:
        body = {"type": "test.step", "idempotency_key": target[0], "dependent_on_jobs": [target[1]]}
        return await s.client.post("/api/jobs", json=body, headers=s.owner)

    async def effects(s: Split, target: tuple[str, str]) -> int:
        return int(await s.pg.fetchval("SELECT count(*) FROM jobs WHERE idempotency_key = $1", target[0]))

    await cut_everywhere(split, setup, request, effects)


async def test_an_admins_cancel_with_its_audit_entry(split: Split) -> None:
    async def request(s: Split, job: str) -> Any:
        return await s.client.post(f"/api/jobs/{job}/cancel", headers=s.root)

    async def effects(s: Split, job: str) -> int:
        cancelled = await _events(s, job, "cancelled")
        audited = await _audited(s, "job.cancel", job)
        assert cancelled == audited, f"{cancelled} cancellations, {audited} audit entries"
        return cancelled

    await cut_everywhere(split, Split.job, request, effects)


async def test_an_admins_retry_with_its_audit_entry(split: Split) -> None:
    async def request(s: Split, job: str) -> Any:
        return await s.client.post(f"/api/jobs/{job}/retry", headers=s.root)

    async def effects(s: Split, job: str) -> int:
        retried = await _events(s, job, "queued") - 1  # the first: its enqueue
        audited = await _audited(s, "job.retry", job)
        assert retried == audited, f"{retried} retries, {audited} audit entries"
        return retried

    await cut_everywhere(split, Split.failed_job, request, effects)


async def test_an_admins_bulk_cancel_with_its_audit_entry(split: Split) -> None:
    async def setup(s: Split) -> list[str]:
        return [await s.job(), await s.job()]

    async def request(s: Split, jobs: list[str]) -> Any:
        return await s.client.post("/api/jobs/bulk", json={"action": "cancel", "ids": jobs}, headers=s.root)

    async def effects(s: Split, jobs: list[str]) -> int:
        cancelled = [await _events(s, job, "cancelled") for job in jobs]
        audited = await s.pg.fetchval(
            "SELECT count(*) FROM audit_log WHERE action = 'jobs.bulk_cancel' AND count > 0 AND target_ids ? $1",
            jobs[0],
        )
        assert cancelled in ([0, 0], [1, 1]), cancelled
        assert audited == cancelled[0], f"{cancelled} cancellations, {audited} audit entries"
        return audited

    await cut_everywhere(split, setup, request, effects)


async def test_a_limits_change_with_its_audit_entry(split: Split) -> None:
    async def setup(s: Split) -> int:
        return await s.pg.fetchval("SELECT count(*) FROM audit_log WHERE action = 'job_type.limits'") + 2

    async def request(s: Split, limit: int) -> Any:
        body = {"max_running": limit}
        return await s.client.put("/api/job-types/test.step/limits", json=body, headers=s.root)

    async def effects(s: Split, limit: int) -> int:
        kept = await s.pg.fetchval("SELECT max_running FROM job_type_controls WHERE type = 'test.step'")
        audited = await s.pg.fetchval(
            "SELECT count(*) FROM audit_log WHERE action = 'job_type.limits' AND outcome = 'ok' "
            "AND detail::text LIKE '%' || $1 || '%'",
            f": {limit}",
        )
        assert (kept == limit) == (audited >= 1), f"limit {kept}, {audited} audit entries"
        return 1 if kept == limit else 0

    await cut_everywhere(split, setup, request, effects)


async def test_a_job_forms_post_repeated_with_its_form_key(split: Split) -> None:
    """The browser's job form: a repeat of the post (its form key) after a cut starts one job."""
    await switch_to(split.client, "owner@example.com")
    token = await csrf(split.client)

    async def setup(s: Split) -> str:
        return str(uuid.uuid4())

    async def request(s: Split, key: str) -> Any:
        form = {"_csrf_token": token, "_form_key": key, "seconds": "0", "label": key}
        return await s.client.post("/jobs/new/test.step", data=form, follow_redirects=False)

    async def effects(s: Split, key: str) -> int:
        return int(await s.pg.fetchval("SELECT count(*) FROM jobs WHERE input_data->>'label' = $1", key))

    await cut_everywhere(split, setup, request, effects)


async def test_an_admins_user_disable_form_with_its_audit_entry(split: Split, db_url: str) -> None:
    """The browser's admin form: a person disabled with its audit entry, or neither."""
    await switch_to(split.client, "root@example.com")
    token = await csrf(split.client)

    async def setup(s: Split) -> int:
        return (await add_user(db_url, f"{uuid.uuid4()}@example.com")).id

    async def request(s: Split, user_id: int) -> Any:
        form = {"_csrf_token": token}
        return await s.client.post(f"/admin/users/{user_id}/disable", data=form, follow_redirects=False)

    async def effects(s: Split, user_id: int) -> int:
        disabled = not await s.pg.fetchval("SELECT is_active FROM users WHERE id = $1", user_id)
        audited = await _audited(s, "user.disable", user_id)
        assert audited == disabled, f"disabled: {disabled}, {audited} audit entries"
        return audited

    await cut_everywhere(split, setup, request, effects)


async def test_an_admins_approval_with_its_audit_entry_and_the_next_step_released(
    split: Split, engine: AsyncEngine, settings: Settings
) -> None:
    """A step's approval, its audit entry and the release of the step after it: together or not at all."""

    async def setup(s: Split) -> tuple[str, str]:
        steps = [
            {"key": "draft", "type": "test.step", "requires_approval": True},
            {"key": "publish", "type": "test.step", "depends_on": ["draft"]},
        ]
        r = await s.client.post("/api/pipelines", json={"name": "split", "steps": steps}, headers=s.owner)
        assert r.status_code == 201, r.text
        ids = {step["key"]: str(step["job_id"]) for step in r.json()["steps"]}
        await claim(engine, uuid.UUID(ids["draft"]))
        await finish(engine, settings, uuid.UUID(ids["draft"]), "completed", result={})
        return ids["draft"], ids["publish"]

    async def request(s: Split, target: tuple[str, str]) -> Any:
        return await s.client.post(f"/api/jobs/{target[0]}/approve", headers=s.root)

    async def effects(s: Split, target: tuple[str, str]) -> int:
        draft, publish = target
        approved = await _events(s, draft, "completed")
        audited = await _audited(s, "job.approve", draft)
        waiting = await s.pg.fetchval("SELECT pending_parents FROM jobs WHERE id = $1", uuid.UUID(publish))
        assert approved == audited == 1 - waiting, f"{approved} approvals, {audited} audit entries, {waiting}"
        return approved

    await cut_everywhere(split, setup, request, effects)
