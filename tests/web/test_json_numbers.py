"""A number JSON cannot carry, in JSON a person gave (an ``http.request`` JSON body, a form's JSON field,
a spreadsheet cell), is refused in words by the shared reader: ``NaN``/``Infinity`` were read and sent
on as they came (not JSON), a fraction past the float range became ``Infinity``, and a whole number past
the digit limit was refused with Python's own advice to call ``sys.set_int_max_str_digits()``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app import typed_json
from app.processors import registry


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"a": NaN}', "NaN is not a JSON value: JSON has no NaN or Infinity; send a number, or null"),
        ("[-Infinity]", "-Infinity is not a JSON value"),
        ('{"a": 1e999}', "the number 1e999 is out of range: numbers go up to about 1.8e308"),
        (
            "1" * 5000,
            "the number 111111111111…111111 (5,000 characters) is out of range: a whole number has at most "
            "4,300 digits (send a larger one as text)",
        ),
    ],
)
def test_a_number_json_cannot_carry_is_refused_in_words(text: str, words: str) -> None:
    with pytest.raises(ValueError) as caught:
        typed_json.parse(text)
    assert words in str(caught.value)
    assert "sys.set_int_max_str_digits" not in str(caught.value)


def test_numbers_in_range_are_read_as_before() -> None:
    assert typed_json.parse('{"a": 1.5e308, "b": -0.0, "c": ' + "9" * 4300 + "}")["a"] == 1.5e308


def test_an_http_request_json_body_with_nan_is_refused_at_submission() -> None:
    spec = registry.get("http.request")
    assert spec is not None
    base = {"url": "https://example.com/", "method": "POST", "body_type": "json"}
    with pytest.raises(ValidationError) as caught:
        spec.input_model.model_validate({**base, "body": '{"ratio": NaN}'})
    assert "NaN is not a JSON value" in str(caught.value)
    spec.input_model.model_validate({**base, "body": '{"ratio": 0.5}'})
