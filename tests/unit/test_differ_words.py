"""One wording for what differs when a one-time key is sent again with another request: a job's
``idempotency_key`` (:mod:`app.jobs.queue.repeats`), a pipeline's and a batch's form key
(:mod:`app.actions.pipelines`, :mod:`app.batches`) and the API's keys for pipelines and batches
(:mod:`app.request_keys`) built "(a, b differ)" each on its own; they all use
:func:`app.errors.differ_words`, next to :class:`app.errors.KeyReused`."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from app.errors import differ_words
from app.jobs.queue.repeats import Repeat, refusal

APP = Path(__file__).resolve().parents[2] / "app"


def test_the_words() -> None:
    assert differ_words(()) == ""
    assert differ_words(("name",)) == " (name differs)"
    assert differ_words(("type", "rows")) == " (type, rows differ)"
    assert differ_words(("a", "b", "c"), 2) == " (a, b and 1 more differ)"
    assert differ_words([f"steps[{i}]" for i in range(1_002)], 1) == " (steps[0] and 1,001 more differ)"


def test_a_jobs_key_refusal_says_it_in_those_words() -> None:
    job = uuid.uuid4()
    message = str(refusal(Repeat(0, {"id": job}, ("input_data", "priority"))).errors["idempotency_key"])  # type: ignore[arg-type]
    assert f"which made job {job} (input_data, priority differ); repeat" in message


def test_no_other_module_builds_the_wording() -> None:
    """The verb chosen by a count ("differs" for one, "differ" for more) is written in app/errors.py only."""
    built = re.compile(r"""["']differs["'] if len\(""")
    found = [str(p.relative_to(APP)) for p in APP.rglob("*.py") if built.search(p.read_text())]
    assert found == ["errors.py"], found
