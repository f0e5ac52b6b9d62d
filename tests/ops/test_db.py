"""``app.db``'s statements straight on asyncpg: the compiled-SQL cache answers for the statement asked about.

The cache used to be keyed by ``id(statement)`` alone. A statement built per call is freed as soon as the
call returns, and CPython hands its id to the next object of the same size, so the next per-call
statement got the previous one's SQL: in a loop of 2,000 such statements, 1,999 came back wrong.
"""

from __future__ import annotations

import gc
import json
import math
from typing import Any

import pytest
from sqlalchemy import text

from app import db


def test_transient_statements_get_their_own_sql() -> None:
    wrong = 0
    for i in range(2000):
        sql, names = db.compiled_sql(text(f"SELECT {i} AS n, :p{i} AS p"))
        if sql != f"SELECT {i} AS n, $1 AS p" or names != (f"p{i}",):
            wrong += 1
    assert wrong == 0


def test_a_kept_statement_compiles_once_and_its_entry_goes_with_it() -> None:
    statement = text("SELECT :a + :b AS total")
    first = db.compiled_sql(statement)
    assert first == ("SELECT $1 + $2 AS total", ("a", "b"))
    assert db.compiled_sql(statement) is first
    key = id(statement)
    assert key in db._COMPILED
    del statement
    gc.collect()
    assert key not in db._COMPILED


def test_the_cache_does_not_grow_with_transient_statements() -> None:
    before = len(db._COMPILED)
    for i in range(500):
        db.compiled_sql(text(f"SELECT {i}"))
    assert len(db._COMPILED) <= before + 1


async def test_read_rows_with_per_call_statements_on_postgresql(engine: Any) -> None:
    """The real effect of a wrong cache hit: each per-call statement's rows come from its own SQL."""
    for i in range(50):
        rows = await db.read_rows(engine, text(f"SELECT {i} AS n, CAST(:v AS text) AS v"), {"v": f"v{i}"})
        assert rows == [{"n": i, "v": f"v{i}"}]


JSON_TEXTS = [
    '{"n": 1, "s": "héllo \\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\n", "l": [1, 2.5, -0, true, null]}',
    "123456789012345678901234567890",  # beyond 64 bits
    "1e400",  # numeric keeps it; a float cannot
    "-1.5e400",
    "1e-400",
    "0.1000000000000000055511151231257827021181583404541015625",
    '{"a": 1, "a": 2}',  # jsonb keeps the last
    '"\\u0001 \\u001f \\u2028"',
    "[[[[[[[[[[[]]]]]]]]]]]",
]


async def test_jsonb_reads_as_json_reads_it(engine: Any) -> None:
    """Every ``jsonb`` value the engine reads is what ``json.loads`` makes of PostgreSQL's own text for it:
    numbers beyond a float's range and 64 bits, escapes, the last of a repeated key."""

    for source in JSON_TEXTS:
        rows = await db.read_rows(
            engine,
            text(
                "SELECT CAST(CAST(:t AS text) AS jsonb) AS v, CAST(CAST(CAST(:t AS text) AS jsonb) AS text) AS t"
            ),
            {"t": source},
        )
        got, printed = rows[0]["v"], rows[0]["t"]
        expected = json.loads(printed)
        assert got == expected or (got != got and expected != expected), (source, got, expected)
        assert type(got) is type(expected), (source, type(got), type(expected))


@pytest.mark.parametrize("source", ["1e400", "-1e400", "NaN", "Infinity", '{"x": [1e999]}'])
def test_text_msgspec_refuses_reads_as_json_reads_it(source: str) -> None:
    """Text msgspec's decoder refuses and ``json.loads`` reads (non-finite numbers) still reads."""
    got, expected = db.json_loads(source), json.loads(source)
    assert repr(got) == repr(expected)
    if isinstance(got, float):
        assert math.isinf(got) or math.isnan(got)
