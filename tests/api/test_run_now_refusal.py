""" "Run now" only moves a job's due time, so it cannot start a step that waits for earlier steps (nor a
job held because its owner is disabled): it answered 200, audited "ok", and the step went on waiting.
Now the queue refuses it — 409 in words, audited as refused — on the API and the job page alike."""

from __future__ import annotations

import asyncpg
from litestar.testing import AsyncTestClient

import tests.support.forms  # noqa: F401  (test.step)
from tests.api.test_approvals_api import token_of
from tests.support.webkit import add_user, csrf_from, switch_to

PIPELINE = {
    "name": "two steps",
    "steps": [
        {"key": "fetch", "type": "test.step", "input_data": {}},
        {"key": "publish", "type": "test.step", "input_data": {}, "depends_on": ["fetch"]},
    ],
}
WORDS = "this step waits for earlier steps: “fetch”"


async def _audited(pg: asyncpg.Connection) -> list[str]:
    rows = await pg.fetch("SELECT outcome FROM audit_log WHERE action = 'job.run_now' ORDER BY id")
    return [r["outcome"] for r in rows]


async def test_run_now_of_a_step_waiting_for_earlier_steps_is_refused_in_words(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    alice = await add_user(db_url, "alice@example.com")
    root = await add_user(db_url, "root@example.com", admin=True)
    as_alice, as_root = await token_of(db_url, alice), await token_of(db_url, root)
    r = await client.post("/api/pipelines", json=PIPELINE, headers=as_alice)
    assert r.status_code == 201, r.text
    ids = {s["key"]: s["job_id"] for s in r.json()["steps"]}
    before = await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", ids["publish"])

    r = await client.post(f"/api/jobs/{ids['publish']}/run-now", headers=as_root)
    assert r.status_code == 409, r.text
    assert WORDS in r.json()["detail"], r.text
    assert (await _audited(pg))[-1].startswith(f"refused: Nothing changed: {WORDS}")

    await switch_to(client, "root@example.com")
    page = await client.get(f"/jobs/{ids['publish']}")
    assert "Waiting for earlier steps" in page.text and "act-run-now" not in page.text
    r = await client.post(f"/jobs/{ids['publish']}/run-now", data={"_csrf_token": csrf_from(page.text)})
    assert r.status_code == 409 and WORDS in r.text, (r.status_code, r.text[:500])
    outcomes = await _audited(pg)
    assert len(outcomes) == 2 and all(o.startswith("refused:") for o in outcomes), outcomes
    assert await pg.fetchval("SELECT run_at FROM jobs WHERE id = $1", ids["publish"]) == before

    # a job held because its owner is disabled would not start either
    await pg.execute("UPDATE jobs SET is_active = false WHERE id = $1", ids["fetch"])
    r = await client.post(f"/api/jobs/{ids['fetch']}/run-now", headers=as_root)
    assert r.status_code == 409 and "held because its owner's account is disabled" in r.json()["detail"], (
        r.text
    )
    # while a job that only waits for its time still runs now
    await pg.execute(
        "UPDATE jobs SET is_active = true, run_at = now() + interval '1 day' WHERE id = $1", ids["fetch"]
    )
    r = await client.post(f"/api/jobs/{ids['fetch']}/run-now", headers=as_root)
    assert r.status_code == 200, r.text
    assert (await _audited(pg))[-1] == "ok"
