"""The same change to an account sent several times at once (a double click, two admins) is done once:
each read the account before any had written, so each answered "ok", was audited as done and alerted
the admins ("made bob an admin" four times). The core reads the row locked where it decides
(:func:`app.users.get_user` with ``lock``); the others see the first one's outcome, "Nothing changed"."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx

from tests.support.webkit import add_user, csrf_from, login, running_server


async def test_concurrent_repeats_of_an_account_action_do_it_once(
    db_url: str, pg: asyncpg.Connection, tmp_path: Any
) -> None:
    await add_user(db_url, "boss@example.com", admin=True)
    bob = await add_user(db_url, "bob@example.com")
    with running_server(db_url, tmp_path / "data") as base:  # the test client runs requests one at a time
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            assert (await login(client, "boss@example.com")).status_code == 303
            token = csrf_from((await client.get("/admin/users")).text)
            for action, name in (
                ("disable", "user.disable"),
                ("enable", "user.enable"),
                ("make-admin", "user.make_admin"),
                ("revoke-admin", "user.revoke_admin"),
            ):
                sent = [
                    client.post(
                        f"/admin/users/{bob.id}/{action}", data={"_csrf_token": token}, follow_redirects=False
                    )
                    for _ in range(6)
                ]
                codes = sorted(r.status_code for r in await asyncio.gather(*sent))
                assert codes == [303] + [409] * 5, (action, codes)
                ok = "SELECT count(*) FROM audit_log WHERE action = $1 AND outcome = 'ok'"
                assert await pg.fetchval(ok, name) == 1, name
