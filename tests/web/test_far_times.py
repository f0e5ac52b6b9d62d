"""A far due time on a job's page reads as a person says it: a job due in year 8999 read
"(in 2547226 days)"; it now reads "in about 6,9… years"."""

from __future__ import annotations

import re

from litestar.testing import AsyncTestClient

from tests.support.webkit import add_token, sign_in_as


async def test_a_job_due_in_a_far_year_reads_in_years_on_its_page(
    client: AsyncTestClient, db_url: str
) -> None:
    user = await sign_in_as(client, db_url, "far@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    r = await client.post(
        "/api/jobs",
        json={
            "type": "email.send",
            "input_data": {"to": ["a@example.com"], "subject": "s", "body": "b"},
            "run_at": "8999-12-31T00:00:00+00:00",
        },
        headers=headers,
    )
    assert r.status_code == 201, r.text
    page = await client.get(f"/jobs/{r.json()['id']}")
    assert page.status_code == 200
    assert re.search(r"\(in about 6,9\d\d years\)", page.text), page.text
    assert not re.search(r"\d{4,} days", page.text)
