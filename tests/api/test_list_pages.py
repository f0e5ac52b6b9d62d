"""A list's ``next`` is given only when there is a next page: a page that is exactly full may be the
last, and a ``next`` given for it led to an empty page (``app.jobs.cursors.page_of``)."""

from __future__ import annotations

from typing import Any

import pytest

import tests.support.forms  # noqa: F401  (test.step)
from tests.support.webkit import app_client, bearer

LIMIT = 3

MAKE = {
    "/api/jobs": lambda i: {"type": "test.step", "input_data": {"label": str(i)}},
    "/api/pipelines": lambda i: {"name": f"p{i}", "steps": [{"key": "a", "type": "test.step"}]},
    "/api/batches": lambda i: {"type": "test.step", "rows": [{}], "name": f"b{i}"},
}


@pytest.mark.parametrize("path", list(MAKE))
async def test_a_page_exactly_full_has_no_next_and_one_more_row_gives_one(
    make_settings: Any, db_url: str, path: str
) -> None:
    async with app_client(make_settings(worker_enabled=False)) as client:
        _, h = await bearer(db_url, "pages@example.com")

        async def add(i: int) -> str:
            made = await client.post(path, json=MAKE[path](i), headers=h)
            assert made.status_code == 201, made.text
            return str(made.json()["id"])

        ids = [await add(i) for i in range(LIMIT)]
        full = (await client.get(f"{path}?limit={LIMIT}", headers=h)).json()
        assert [str(x["id"]) for x in full["items"]] == ids[::-1]
        assert full["next"] is None

        ids.append(await add(LIMIT))
        first = (await client.get(f"{path}?limit={LIMIT}", headers=h)).json()
        assert [str(x["id"]) for x in first["items"]] == ids[:0:-1]
        assert first["next"] is not None
        rest = (await client.get(f"{path}?limit={LIMIT}&after={first['next']}", headers=h)).json()
        assert [str(x["id"]) for x in rest["items"]] == [ids[0]]
        assert rest["next"] is None
