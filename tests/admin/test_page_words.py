"""What pages say, in the person's words: a job's history gives times in the viewer's zone (not the ISO
text the queue stored), every built-in drop-down offers words rather than codes, untitled steps of one
type in a pipeline can be told apart, and a batch whose rows wait to try again after errors says so."""

from __future__ import annotations

import re
import uuid

import asyncpg
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (registers test.form, …)
from app.auth import CurrentUser
from app.processors import registry
from app.settings import Settings
from app.web import forms
from tests.admin.test_admin import enqueue, post
from tests.support.webkit import HX, add_token

ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


async def test_a_job_s_history_says_times_in_the_viewer_s_zone(
    client: AsyncTestClient, admin: CurrentUser, ui_settings: Settings, pg: asyncpg.Connection
) -> None:
    await pg.execute("UPDATE users SET timezone = 'America/New_York' WHERE id = $1", admin.id)
    job = await enqueue(ui_settings, admin.id)
    r = await post(
        client,
        f"/jobs/{job}/reschedule",
        {"date": "2099-06-02", "time": "09:30", "tz": "Europe/Berlin"},
        headers=HX,
    )
    assert r.status_code == 200, r.text
    page = (await client.get(f"/jobs/{job}")).text
    history = page[page.index('class="history') :]
    assert "run at 2 Jun 2099, 03:30 EDT" in history, history[:3000]
    assert "run at 2099" not in page


def test_every_built_in_drop_down_offers_words() -> None:
    """A choice whose stored values are lowercase codes ("none", "json") shows each in words."""
    coded = []
    for spec in registry.all():
        if spec.type.startswith("test."):
            continue
        for f in forms.form_fields(spec.input_model):
            for c in f.choices:
                if c.value == c.label and c.value.islower():
                    coded.append(f"{spec.type}.{f.name}: {c.value}")
    assert not coded, f"drop-down options shown as their codes: {coded}"


async def test_untitled_steps_of_one_type_are_named_by_their_key(
    client: AsyncTestClient, admin: CurrentUser, db_url: str
) -> None:
    head = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    steps = [
        {"key": key, "type": "http.request", "input_data": {"url": f"https://example.com/{key}"}}
        for key in ("notify-sales", "notify-support", "notify-billing")
    ]
    r = await client.post("/api/pipelines", json={"name": "three hooks", "steps": steps}, headers=head)
    assert r.status_code == 201, r.text
    pid = r.json()["id"]
    titles = [s["title"] for s in (await client.get(f"/api/pipelines/{pid}", headers=head)).json()["steps"]]
    assert sorted(titles) == [
        "Send a web request (webhook) · notify-billing",
        "Send a web request (webhook) · notify-sales",
        "Send a web request (webhook) · notify-support",
    ]
    page = (await client.get(f"/pipelines/{pid}")).text
    for key in ("notify-sales", "notify-support", "notify-billing"):
        assert f"Send a web request (webhook) · {key}</span>" in page


async def test_a_batch_whose_rows_wait_to_try_again_says_so(
    client: AsyncTestClient, admin: CurrentUser, db_url: str, pg: asyncpg.Connection
) -> None:
    head = {"Authorization": f"Bearer {await add_token(db_url, admin.id)}"}
    rows = [{"url": f"http://jobs.test:9/row/{i}"} for i in range(3)]
    r = await client.post("/api/batches", json={"type": "http.request", "rows": rows}, headers=head)
    assert r.status_code == 201, r.text
    bid = uuid.UUID(r.json()["id"])
    # as the worker leaves them after a connection error with attempts left: queued again, later
    await pg.execute(
        "UPDATE jobs SET attempts = 1, error_message = 'could not connect to 127.0.0.1:9: connection refused',"
        " run_at = now() + interval '30 seconds' WHERE batch_id = $1 AND id <> (SELECT id FROM jobs ORDER BY id LIMIT 1)",
        bid,
    )
    page = (await client.get(f"/batches/{bid}")).text
    assert 'id="batch-retrying"' in page
    hint = page[page.index('id="batch-retrying"') :][:600]
    assert "2 rows are waiting to try again" in hint and "connection refused" in hint, hint
    # every waiting row waits to try again: the badge says so, as a job's does
    await pg.execute("UPDATE jobs SET attempts = 1 WHERE batch_id = $1", bid)
    page = (await client.get(f"/batches/{bid}")).text
    assert "Retrying</span>" in page and "3 rows are waiting to try again" in page
