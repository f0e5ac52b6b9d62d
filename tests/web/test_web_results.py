"""Jobs a person can tell apart and find: names from the input, the My jobs search box (app.web.my_jobs,
app.jobs.naming)."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.jobs.naming import name_from_input, url_words
from app.processors import registry
from app.settings import Settings
from app.web.my_jobs import like_pattern
from tests.support.webkit import HX, bearer, switch_to


@pytest.fixture
def ui_settings(make_settings: Any) -> Settings:
    return make_settings(worker_enabled=False, upload_max_bytes=200_000)


def test_a_name_comes_from_the_file_the_url_or_the_subject() -> None:
    thumbs = registry.get("images.thumbnail")
    sheet = registry.get("images.contact_sheet")
    assert thumbs is not None and sheet is not None
    fid = "01a23310-acd3-73bc-9239-90788ee4c799"
    other = "01a23310-acd3-73bc-9239-90788ee4c79a"
    assert name_from_input(thumbs.input_model, {"image": fid}, {fid: "holiday.jpg"}) == "holiday.jpg"
    assert (
        name_from_input(sheet.input_model, {"images": [fid, other], "title": "x"}, {fid: "a.png"})
        == "a.png and 1 more"
    )
    assert url_words("https://www.example.com/hooks/build/?x=1") == "example.com/hooks/build"
    assert url_words("javascript:alert(1)") is None
    assert name_from_input(None, {"url": "https://example.com/a", "method": "POST"}, {}) == "example.com/a"
    assert (
        name_from_input(None, {"to": "a@example.com", "subject": "  Monthly\nnumbers "}, {})
        == "Monthly numbers"
    )
    assert name_from_input(None, {"seconds": 3}, {}) is None
    assert len(name_from_input(None, {"subject": "x" * 500}, {}) or "") == 80


def test_a_search_pattern_matches_percent_and_underscore_as_typed() -> None:
    assert like_pattern("50%_off\\") == "%50\\%\\_off\\\\%"


async def test_jobs_are_named_from_their_input_on_the_page_the_api_and_the_list(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    user, h = await bearer(db_url, "ann@example.com")
    made = await client.post(
        "/api/jobs",
        json={
            "type": "http.request",
            "input_data": {"url": "https://hooks.example.com/build/42", "method": "GET"},
        },
        headers=h,
    )
    assert made.status_code == 201, made.text
    assert made.json()["title"] == "hooks.example.com/build/42"
    named = await client.post(
        "/api/jobs",
        json={"type": "http.request", "title": "My own name", "input_data": {"url": "https://x.example/"}},
        headers=h,
    )
    assert named.json()["title"] == "My own name"  # a name given is kept
    up = await client.post("/api/files", files={"file": ("holiday.png", PNG)}, headers=h)
    assert up.status_code == 201, up.text
    thumb = await client.post(
        "/api/jobs", json={"type": "images.thumbnail", "input_data": {"image": up.json()["id"]}}, headers=h
    )
    assert thumb.json()["title"] == "holiday.png"

    await switch_to(client, "ann@example.com")
    listing = (await client.get("/jobs")).text
    assert "hooks.example.com/build/42" in listing
    assert "holiday.png" in listing
    page = (await client.get(f"/jobs/{made.json()['id']}")).text
    assert "<h1>hooks.example.com/build/42</h1>" in page

    # a job submitted before names were derived gets one on its page
    await pg.execute("UPDATE jobs SET title = NULL WHERE id = $1", made.json()["id"])
    page = (await client.get(f"/jobs/{made.json()['id']}")).text
    assert "<h1>hooks.example.com/build/42</h1>" in page


async def test_my_jobs_search_finds_by_name_and_input_with_the_filters_and_pages(
    client: AsyncTestClient, db_url: str, pg: asyncpg.Connection
) -> None:
    _, h = await bearer(db_url, "ann@example.com")
    _, other = await bearer(db_url, "bob@example.com")
    for n in range(3):
        await client.post(
            "/api/jobs",
            json={"type": "http.request", "input_data": {"url": f"https://shop.example/orders/{n}"}},
            headers=h,
        )
    await client.post(
        "/api/jobs",
        json={
            "type": "email.send",
            "input_data": {"to": ["x@example.com"], "subject": "Q3 50% off", "body": "Hi"},
        },
        headers=h,
    )
    await client.post(
        "/api/jobs",
        json={"type": "http.request", "title": "Nightly_run", "input_data": {"url": "https://n.example/"}},
        headers=h,
    )
    await client.post(
        "/api/jobs",
        json={"type": "http.request", "title": "Nightly run", "input_data": {"url": "https://n.example/"}},
        headers=h,
    )
    await client.post(  # another person's job never shows
        "/api/jobs",
        json={"type": "http.request", "input_data": {"url": "https://shop.example/bob"}},
        headers=other,
    )
    await switch_to(client, "ann@example.com")

    def names(html: str) -> list[str]:
        import re

        return re.findall(r'<td><a href="/jobs/[^"]+">([^<]+)</a>', html)

    found = names((await client.get("/jobs", params={"q": "SHOP.example"})).text)
    assert found == ["shop.example/orders/2", "shop.example/orders/1", "shop.example/orders/0"]
    assert names((await client.get("/jobs", params={"q": "x@example.com"})).text) == ["Q3 50% off"]
    assert names((await client.get("/jobs", params={"q": "50%"})).text) == ["Q3 50% off"]
    assert names((await client.get("/jobs", params={"q": "%"})).text) == ["Q3 50% off"]  # % is a character
    assert names((await client.get("/jobs", params={"q": "Nightly_"})).text) == ["Nightly_run"]
    assert names((await client.get("/jobs", params={"q": "shop", "type": "email.send"})).text) == []
    assert names((await client.get("/jobs", params={"q": "orders", "status": "queued"})).text)
    assert "Nothing matches these filters" in (await client.get("/jobs", params={"q": "nope"})).text
    assert 'value="orders"' in (await client.get("/jobs", params={"q": "orders"})).text

    # keyset paging keeps the search
    ids = [r["id"] for r in await pg.fetch("SELECT id FROM jobs ORDER BY id DESC")]
    more = (await client.get("/jobs", params={"q": "orders", "after": str(ids[4])})).text
    assert names(more) == ["shop.example/orders/1", "shop.example/orders/0"]
    assert "q=orders" in (await client.get("/jobs", params={"q": "orders", "after": str(ids[0])})).text
    assert (await client.get("/jobs", params={"q": "a" * 5000}, headers=HX)).status_code == 200
    assert (await client.get("/jobs", params={"q": "\x00"}, headers=HX)).status_code == 422


PNG = (
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
    b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82"
)
