"""argon2 at its cheapest parameters for the tests' own processes and the servers they start.

At its defaults (RFC 9106's low-memory profile) argon2 costs about a quarter of a second of CPU per hash
here, more on a busy machine, and most web tests make a user (one hash) and sign in (one more): that was
about a third of the whole suite's time. A hash carries its parameters, so one made cheaply verifies under
any parameters, and the app's rules around hashing (the longest password, the dummy hash for an unknown
address, the rehash of a weaker hash at sign-in) run unchanged. Tests of what hashing costs ask for the
real parameters (the ``real_password_hashing`` fixture, ``running_server(real_hashing=True)``).
"""

from __future__ import annotations

from argon2 import PasswordHasher, profiles

from app import auth

REAL = auth._hasher
CHEAP = PasswordHasher.from_parameters(profiles.CHEAPEST)


def use(hasher: PasswordHasher) -> None:
    """Hash, verify and judge rehashing with ``hasher`` from now on, the dummy hash included."""
    auth._hasher = hasher
    auth.dummy_hash.cache_clear()
