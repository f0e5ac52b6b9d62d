"""A page of /admin/users past the last e-mail (a stale "Next" link, an edited address) showed an empty
table and nothing else: it says there are no more people, with the way back to the first page."""

from __future__ import annotations

from litestar.testing import AsyncTestClient

from tests.support.webkit import sign_in_as


async def test_a_page_past_the_last_user_says_so_with_the_way_back(
    client: AsyncTestClient, db_url: str
) -> None:
    await sign_in_as(client, db_url, "root@example.com", admin=True)
    page = (await client.get("/admin/users?after=zzz@example.com")).text
    assert 'id="no-more-users"' in page and "No more people" in page
    assert 'id="users-table"' not in page
    assert '<a href="/admin/users">Back to the first page</a>' in page

    first = (await client.get("/admin/users")).text
    assert 'id="users-table"' in first and "No more people" not in first
