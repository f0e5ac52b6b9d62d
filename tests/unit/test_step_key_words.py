"""A step key's refusal says which characters a key may hold: "letters" read as any letter, and a key
like "ä" was refused by words that allowed it."""

from __future__ import annotations

import pytest

from app.errors import BadInput
from app.jobs.graph import check_key


@pytest.mark.parametrize("key", ["ä", "шаг", "step 1", "_first", ""])
def test_a_key_refused_is_told_the_characters_a_key_may_hold(key: str) -> None:
    with pytest.raises(BadInput) as caught:
        check_key(key, "steps[0].key")
    said = caught.value.errors["steps[0].key"]
    assert "a–z, A–Z, 0–9, '_' and '-' (no accented or other letters)" in said, said


def test_a_key_of_those_characters_is_taken() -> None:
    assert check_key("Resize-2_b", "steps[0].key") == "Resize-2_b"
