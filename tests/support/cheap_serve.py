"""``jobdesk`` (:func:`app.cli.main`) with argon2 at its cheapest (:mod:`tests.support.cheap_hashing`):
what :func:`tests.support.webkit.running_server` starts, as ``python -m tests.support.cheap_serve serve``."""

from __future__ import annotations

from app.cli import main
from tests.support.cheap_hashing import CHEAP, use

if __name__ == "__main__":
    use(CHEAP)
    main()
