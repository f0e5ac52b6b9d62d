"""Acts that hand out a lasting credential refuse a request made with an API token, whether the action
was given the signed-in person or an :class:`~app.actions.trail.Actor` around them: given an Actor, the
rule read ``token_id`` off the Actor, which has none, and let the token's request through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.actions.trail import Actor
from app.auth import CurrentUser
from app.errors import Forbidden
from app.tokens import require_signed_in_browser


@pytest.mark.parametrize("wrap", [lambda u: u, lambda u: Actor(u, ip="192.0.2.1")], ids=["user", "actor"])
def test_a_token_request_is_refused_however_the_person_is_passed(wrap: Callable[[CurrentUser], Any]) -> None:
    with_token = CurrentUser(1, "ann@example.com", True, token_id=7)
    with pytest.raises(Forbidden):
        require_signed_in_browser(wrap(with_token))
    require_signed_in_browser(wrap(CurrentUser(1, "ann@example.com", True)))
