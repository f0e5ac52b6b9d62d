"""A 404 for an address no route matches (``/nonexistent``) showed "Sign in" in the top bar to a person
who was signed in: Litestar answers it before the middleware that finds the user runs. Other 404s (an
unknown job) showed the person."""

from __future__ import annotations

from litestar.testing import AsyncTestClient

from tests.support.webkit import add_user, login


async def test_the_not_found_page_of_an_unknown_address_knows_who_is_signed_in(
    client: AsyncTestClient, db_url: str
) -> None:
    await add_user(db_url, "ann@example.com")
    assert (await login(client, "ann@example.com")).status_code == 303
    for path in ("/nonexistent", "/admin/users/3/explode", "/jobs/not-a-job"):
        r = await client.get(path)
        assert r.status_code == 404, (path, r.status_code)
        assert 'title="Signed in as ann@example.com' in r.text, (path, r.text[-1500:])
    client.cookies.clear()
    r = await client.get("/nonexistent")
    assert r.status_code == 404 and "Signed in as" not in r.text
