"""``{"$literal": value}`` in a step's input is ``value`` when the step runs, so every check made at
submission sees ``value``: whatever a plain value is refused for, the same value wrapped is refused for
too, under the same field path — the schema's checks, those that need the settings (Jobdesk's own
pages) and the file checks (another person's file, a table given as a picture). A ``$literal`` is never
read as a ``$ref``."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from app.errors import BadInput
from app.settings import Settings
from tests.queue.test_for_each import create, step
from tests.support.factories import TestUser


async def _file(pg: asyncpg.Connection, user_id: int, content_type: str) -> str:
    fid = uuid.uuid4()
    await pg.execute(
        "INSERT INTO files (id, user_id, name, content_type, size, sha256) VALUES ($1, $2, 'f', $3, 10, '')",
        fid,
        user_id,
        content_type,
    )
    return str(fid)


async def _refused(
    engine: Any, settings: Settings, owner: TestUser, steps: list[dict[str, Any]]
) -> dict[str, str]:
    try:
        await create(engine, settings, owner, steps)
    except BadInput as exc:
        return dict(exc.errors)
    pytest.fail(f"accepted: {steps[0]['type']} {steps[0]['input_data']}")


def _wrapped(value: Any) -> dict[str, Any]:
    return {"$literal": value}


async def test_every_check_a_plain_value_fails_the_same_value_as_literal_fails_too(
    engine: Any, settings: Settings, owner: TestUser, pg: asyncpg.Connection
) -> None:
    someone = await pg.fetchval(
        "INSERT INTO users (email, password_hash) VALUES ('x@example.com', 'x') RETURNING id"
    )
    theirs = await _file(pg, someone, "image/png")
    table = await _file(pg, owner.id, "text/csv")
    own = settings.jobdesk_base_url
    cases: list[tuple[str, str, Any]] = [
        ("http.request", "url", "ftp://example.com/x"),
        ("http.request", "url", f"{own}/login"),
        ("http.request", "url", "http://10.0.0.1/x"),
        ("images.thumbnail", "image", theirs),
        ("images.thumbnail", "image", table),
    ]
    for type_, name, value in cases:
        plain = await _refused(engine, settings, owner, [step("a", type_, {name: value})])
        assert list(plain) == [f"steps[0].input_data.{name}"], (value, plain)
        literal = await _refused(engine, settings, owner, [step("a", type_, {name: _wrapped(value)})])
        assert literal == plain, value
    # a literal inside a list of files: the item's path, as for a plain id
    for value in (theirs, table):
        plain = await _refused(
            engine, settings, owner, [step("a", "images.contact_sheet", {"images": [value]})]
        )
        assert list(plain) == ["steps[0].input_data.images[0]"], plain
        wrapped = [_wrapped(value)]
        literal = await _refused(
            engine, settings, owner, [step("a", "images.contact_sheet", {"images": wrapped})]
        )
        assert literal == plain
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_literal_is_never_read_as_a_ref(engine: Any, settings: Settings, owner: TestUser) -> None:
    """A ``$ref`` inside a ``$literal`` is the value ``{"$ref": …}``: not a URL, not a file id, and not a
    reference to a step (no "does not depend on" about it)."""
    ref = {"$ref": "elsewhere.url"}
    errors = await _refused(engine, settings, owner, [step("a", "http.request", {"url": _wrapped(ref)})])
    assert list(errors) == ["steps[0].input_data.url"] and "depend" not in errors["steps[0].input_data.url"]
