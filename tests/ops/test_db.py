"""``app.db``'s statements straight on asyncpg: the compiled-SQL cache answers for the statement asked about.

The cache used to be keyed by ``id(statement)`` alone. A statement built per call is freed as soon as the
call returns, and CPython hands its id to the next object of the same size, so the next per-call
statement got the previous one's SQL: in a loop of 2,000 such statements, 1,999 came back wrong.
"""

from __future__ import annotations

import gc
from typing import Any

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
