"""``check_input`` decides from one JSON encoding of the input whether it can skip the walk of every
value and key; it must refuse exactly what the walk refuses, with the same field path and reason."""

from __future__ import annotations

from typing import Any

import pytest

from app.errors import BadInput
from app.jobs import payload
from app.jobs.payload import MAX_DEPTH, check_input


def _nested(levels: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return {"a": value}


class Weird:
    pass


CASES: list[dict[Any, Any]] = [
    {"i": 1},
    {"name": "a\x00b"},
    {"name": "x\ud800"},
    {"name": "\\u0000 and \\ud800 as plain text"},
    {"name": "NaN Infinity"},
    {"n": float("nan")},
    {"n": float("inf")},
    {1: "key that is not text"},
    {"deep": {2: "nested key that is not text"}},
    {"k\x00": 1},
    {"k\udfff": 1},
    {"t": (1, "x\x00")},
    {"o": Weird()},
    {"pair": "\ud83d\ude00 é"},
    _nested(MAX_DEPTH - 1),
    _nested(MAX_DEPTH),
    _nested(MAX_DEPTH + 3),
    {"braces": "{{{[[["},
]


def _by_walk(data: dict[Any, Any]) -> tuple[str, str] | None:
    return payload._find_problem(data, "input_data", 0)


@pytest.mark.parametrize("data", CASES, ids=range(len(CASES)))
def test_the_encoded_check_refuses_exactly_what_the_walk_refuses(data: dict[Any, Any]) -> None:
    expected = _by_walk(data)
    if expected is None:
        assert check_input(data, 1 << 20) == payload.json_text(data)
        return
    with pytest.raises(BadInput) as err:
        check_input(data, 1 << 20)
    assert err.value.errors == {expected[0]: expected[1]}


def test_the_walk_is_switched_off_only_when_the_text_proves_it_needless() -> None:
    assert payload._plain_json({"i": 1, "s": "é"}) == '{"i":1,"s":"é"}'
    for data in ({"s": "a\x00"}, {"s": "\ud800"}, {1: 2}, {"d": {}}, _nested(MAX_DEPTH)):
        assert payload._plain_json(data) is None, data


def test_a_whole_number_too_long_to_write_as_json_is_refused_naming_it_not_stored_as_null() -> None:
    """The JSON API refuses a whole number of more digits than Python writes (4,300) naming its field; a
    processor's next job, a pipeline's step or a Python caller's input with one was stored with ``null``
    in its place, and the job then ran on a value nobody gave it."""
    with pytest.raises(BadInput) as err:
        check_input({"xs": [1, {"n": 10**5000}]}, 1 << 20)
    ((field, why),) = err.value.errors.items()
    assert field == "input_data.xs[1].n"
    assert "4,300 digits" in why, why
    assert check_input({"n": 10**4000}, 1 << 20) == '{"n":' + str(10**4000) + "}"  # within it: kept
