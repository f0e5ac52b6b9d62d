"""A job named with U+202E (right-to-left override) in its owner's notice: "Your job “‮Quarterly” has
finished." read backwards from the name on in the e-mail (plain text) and wherever the stored text is
shown as it is. The name is set apart with FSI … PDI and its controls closed — in the notices written in
Python and in the worker's one-statement completion, written in SQL — while a left-to-right name stays
exactly as it was."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

import tests.support.forms  # noqa: F401  (registers test.form)
from app.formatting import balanced, isolated, read_turning_class, turning_class
from app.jobs.queue import Outcome
from app.notifications import build_message
from app.settings import Settings
from app.worker.completer import Completer
from tests.support.factories import make_user
from tests.support.jobsteps import claim, enqueue, failed_job, finish
from tests.support.workers import standalone_completer

RLO, PDF, FSI, PDI = "\u202e", "\u202c", "\u2068", "\u2069"
NAME = f"{RLO}Quarterly report"
SHOWN = f"{FSI}{NAME}{PDF}{PDI}"


@pytest.fixture
async def completer(engine: AsyncEngine, settings: Settings) -> AsyncIterator[Completer]:
    async with standalone_completer(settings, engine, "test-worker") as completer:
        yield completer


async def _texts(pg: asyncpg.Connection, user_id: int) -> list[str]:
    rows = await pg.fetch(
        "SELECT text FROM notifications WHERE user_id = $1 AND read_at IS NULL ORDER BY id", user_id
    )
    await pg.execute("UPDATE notifications SET read_at = now() WHERE user_id = $1", user_id)  # next is new
    return [r["text"] for r in rows]


async def test_a_name_with_an_override_is_set_apart_in_notices_and_their_email(
    engine: AsyncEngine, settings: Settings, pg: asyncpg.Connection, completer: Completer
) -> None:
    owner = await make_user(pg)
    # the one-statement completion (SQL)
    jid = await enqueue(engine, settings, owner.id, title=NAME)
    await claim(engine, jid)
    assert (await completer.write([Outcome(jid, "completed", result="null", claim=1)])).status
    assert await _texts(pg, owner.id) == [f"Your job “{SHOWN}” has finished."]
    # the transaction's completion and a failure (Python)
    jid = await enqueue(engine, settings, owner.id, title=NAME)
    await claim(engine, jid)
    await finish(engine, settings, jid, "completed", result="null")
    assert await _texts(pg, owner.id) == [f"Your job “{SHOWN}” has finished."]
    await failed_job(engine, settings, owner.id, "boom", title=NAME)
    texts = await _texts(pg, owner.id)
    assert texts == [f"Your job “{SHOWN}” failed."]
    assert balanced(texts[0]) == texts[0]
    # a left-to-right name is kept byte for byte, on both paths
    for title in ("Quarterly", "Überweisung — März"):
        jid = await enqueue(engine, settings, owner.id, title=title)
        await claim(engine, jid)
        await completer.write([Outcome(jid, "completed", result="null", claim=1)])
        assert await _texts(pg, owner.id) == [f"Your job “{title}” has finished."]
    # the e-mail: the words after the name keep their own direction
    rows = await pg.fetch("SELECT * FROM notifications WHERE user_id = $1 ORDER BY id", owner.id)
    body = build_message(settings, "ann@example.com", rows[:1]).get_content()
    line = next(line for line in body.splitlines() if "Quarterly" in line)
    assert line == f"- Your job “{SHOWN}” has finished."


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        "Überweisung",
        "שלום report",
        "report ١٢٣",
        "\u0591",  # a Hebrew accent alone: a mark, not a letter, turns nothing
        f"{RLO}abc",
        f"{PDF}{PDI}abc{PDF}",
        f"\u2067a\u202bb{PDI}c{PDF}",
        f"\u202ax{PDF}{PDF}\u2066y",
        "\U00010800 Cypriot",
        "",
    ],
)
async def test_the_database_sets_text_apart_as_python_does(pg: asyncpg.Connection, value: str) -> None:
    shown = await pg.fetchval("SELECT jobdesk_isolated($1, $2)", value, turning_class())
    assert shown == isolated(value)


def test_the_kept_bracket_is_the_one_this_python_reads() -> None:
    """The bracket kept in the source for one version of the Unicode data is what reading that data gives,
    so SQL isolates what Python does whichever of the two the worker used."""
    assert turning_class() == read_turning_class()
    assert all(isolated(ch) != ch for ch in read_turning_class()[1:-1].replace("-", ""))
