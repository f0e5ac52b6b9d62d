"""EXPLAIN of an app statement on a test database: the plan as a flat list of nodes, for checks such as
"no sequential scan of jobs" or "reads at most N rows"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import asyncpg

from app.db import compiled_sql


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, the root first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


async def explain(
    conn: asyncpg.Connection, statement: Any, params: dict[str, Any], *, analyze: bool = False
) -> list[dict[str, Any]]:
    """The plan nodes of ``statement`` (a ``text()`` of app code) with ``params`` bound; ``analyze``
    runs it too, so that the nodes carry the rows actually read."""
    sql, names = compiled_sql(statement)
    options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
    raw = await conn.fetchval(f"EXPLAIN ({options}) " + sql, *[params[n] for n in names])
    return list(plan_nodes(json.loads(raw)[0]["Plan"]))
