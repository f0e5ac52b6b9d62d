"""The questions asked before a single action name its count and its consequence, read when the page
renders: pausing a job type (its waiting jobs), disabling a user (sessions, API tokens), releasing or
cancelling a person's held jobs, cancelling a pipeline (its unfinished steps)."""

from __future__ import annotations

import html

import asyncpg
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, test.steps)
from app.auth import CurrentUser
from app.settings import Settings
from app.web import confirms
from tests.admin.test_admin import enqueue
from tests.support.webkit import add_token, add_user


def test_the_words_agree_with_the_count() -> None:
    assert confirms.pause_type("images.thumbnail", 37) == (
        "Pause images.thumbnail? 37 jobs waiting do not start until you resume."
    )
    assert "1 job waiting does not start" in confirms.pause_type("x", 1)
    assert "10,000+ jobs waiting do not" in confirms.pause_type("x", 10_000, capped=True)
    assert confirms.pause_type("*", 0, all_types=True).startswith("Pause every job type? No job is waiting")
    steps = [{"status": s} for s in ("completed", "in_progress", "queued", "queued", "cancelled")]
    assert confirms.cancel_pipeline(steps) == (
        "Cancel this pipeline? 3 steps of 5 will not finish (1 running now is asked to stop)."
    )
    assert confirms.held_jobs("a@x.org", 1, release=False) == "Cancel a@x.org's 1 held job? It will not run."


async def test_pause_disable_and_held_jobs_questions_carry_their_counts(
    client: AsyncTestClient, admin: CurrentUser, ui_settings: Settings, db_url: str, pg: asyncpg.Connection
) -> None:
    for _ in range(3):
        await enqueue(ui_settings, admin.id, "test.form")
    page = html.unescape((await client.get("/admin")).text)
    assert 'hx-confirm="Pause test.form? 3 jobs waiting do not start until you resume."' in page
    assert 'hx-confirm="Pause every job type? 3 jobs waiting do not start until you resume."' in page
    assert 'hx-confirm="Pause test.step? No job is waiting now;' in page

    bob = await add_user(db_url, "bob@example.com")
    await add_token(db_url, bob.id)
    await add_token(db_url, bob.id)
    for _ in range(2):
        await enqueue(ui_settings, bob.id, "test.form")
    await pg.execute("UPDATE jobs SET is_active = false WHERE user_id = $1", bob.id)  # held
    page = html.unescape((await client.get("/admin/users")).text)
    assert (
        "Disable bob@example.com? They are signed out of 0 sessions and their 2 API tokens stop working"
        in page
    )
    assert "Let bob@example.com's 2 held jobs run? They start as workers and limits allow." in page
    assert "Cancel bob@example.com's 2 held jobs? They will not run." in page


async def test_the_cancel_pipeline_question_counts_its_unfinished_steps(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, pg: asyncpg.Connection
) -> None:
    headers = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    r = await client.post(
        "/api/pipelines", json={"template": "test.steps", "input_data": {}}, headers=headers
    )
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    page = html.unescape((await client.get(f"/pipelines/{pid}")).text)
    assert "Cancel this pipeline? 4 steps of 4 will not finish." in page
    await pg.execute(
        "UPDATE jobs SET status = 'completed', completed_at = now(), result_data = '{}' WHERE pipeline_id = $1::uuid AND step_key = 'prepare'",
        pid,
    )
    page = html.unescape((await client.get(f"/pipelines/{pid}")).text)
    assert "Cancel this pipeline? 3 steps of 4 will not finish." in page
