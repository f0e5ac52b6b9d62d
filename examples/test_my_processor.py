"""Tests of the example job type, with :mod:`app.testing` (README: "Your own processor").

Run them with the rest of the suite (``make test``), or alone::

    PYTHONPATH=examples .venv/bin/pytest examples/test_my_processor.py
"""

from __future__ import annotations

import io

import my_processor  # noqa: F401  (registers example.word_count)
import pytest
from PIL import Image

from app.errors import BadInput
from app.processors import PermanentError
from app.testing import ProcessorTest


async def test_counts_words_and_lists_the_most_common(tmp_path) -> None:
    t = ProcessorTest(tmp_path)
    run = await t.run("example.word_count", {"text": "<p>Rose is a rose</p>", "ignore": [], "top": 1})
    assert run.data == {"words": 4, "distinct": 3, "top": [{"word": "rose", "count": 2}]}
    assert run.progress[-1] == (1.0, "Counted 4 words")
    run.assert_nothing_enqueued()


async def test_reads_the_body_of_the_fetch_step_it_depends_on(tmp_path) -> None:
    t = ProcessorTest(tmp_path)
    run = await t.run(
        "example.word_count",
        {"text": {"$ref": "fetch.body"}, "ignore": []},
        parents={"fetch": {"status": 200, "body": "hello hello world"}},
    )
    assert run.data["top"][0] == {"word": "hello", "count": 2}


async def test_a_text_without_words_fails_for_good(tmp_path) -> None:
    with pytest.raises(PermanentError, match="no words"):
        await ProcessorTest(tmp_path).run("example.word_count", {"text": "123 456"})


async def test_bad_input_is_refused_naming_the_field(tmp_path) -> None:
    with pytest.raises(BadInput) as err:
        await ProcessorTest(tmp_path).run("example.word_count", {"text": "x", "top": 0})
    assert "input_data.top" in err.value.errors


async def test_a_built_in_type_reads_a_file_you_add(tmp_path) -> None:
    t = ProcessorTest(tmp_path)
    picture = io.BytesIO()
    Image.new("RGB", (40, 30), "red").save(picture, "PNG")
    fid = t.add_file("red.png", picture.getvalue(), "image/png")  # an id for a FileId field
    run = await t.run("images.thumbnail", {"image": fid, "sizes": [20], "name": "red"})
    assert run.files["red-20.jpg"].data[:2] == b"\xff\xd8"  # outputs by name, with their bytes
