"""README.md documents every setting in one table, with its default, and gives the first commands."""

from __future__ import annotations

import re
from pathlib import Path

from app.settings import ENV_NAMES

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
README = (ROOT / "README.md").read_text()


def test_every_setting_is_in_the_configuration_table() -> None:
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]+) \| ([^|]+) \|$", section, flags=re.M)
    documented = {name for name, _, _ in rows}
    assert sorted(set(ENV_NAMES.values()) - documented) == []
    assert sorted(documented - set(ENV_NAMES.values())) == []
    assert all(default.strip() and meaning.strip() for _, default, meaning in rows)


def test_readme_gives_the_two_commands_and_the_first_admin() -> None:
    assert "make run" in README
    assert "make test" in README
    assert "jobdesk create-user you@example.com --admin" in README
    assert "## At-least-once" in README


def test_every_test_that_docs_cases_names_exists() -> None:
    """docs/cases.md explains the real-world cases that tests are named after and lists the tests that
    check each one; a renamed or removed test must not leave the page pointing at nothing."""
    cases = (ROOT / "docs" / "cases.md").read_text()
    named = set(re.findall(r"`((?:\w+/)?test_\w+\.py)::(test_\w+)`", cases))
    assert len(named) > 40
    missing = []
    for file, test in sorted(named):
        path = TESTS / file
        if not path.exists() or not re.search(rf"^(async )?def {test}\(", path.read_text(), flags=re.M):
            missing.append(f"{file}::{test}")
    assert missing == []


def test_every_case_id_a_test_names_is_explained_in_docs_cases() -> None:
    cases = (ROOT / "docs" / "cases.md").read_text()
    explained = set(re.findall(r"^## ([CN]\d\d) —", cases, flags=re.M))
    explained |= set(re.findall(r"^- \*\*([CN]\d\d) —", cases, flags=re.M))
    named = {case for path in TESTS.rglob("*.py") for case in re.findall(r"\b([CN]\d\d)\b", path.read_text())}
    assert sorted(named - explained) == []


def test_the_demo_section_says_it_needs_the_servers_database_url() -> None:
    """``jobdesk demo`` writes into the database, not through the server: started without the server's
    ``DATABASE_URL`` it used the embedded one, where the account was unknown or no worker ran its jobs."""
    section = README.split("## Try it: `jobdesk demo`", 1)[1].split("\n## ", 1)[0]
    assert "needs the same database as the running" in section
    assert "DATABASE_URL='postgresql://user:password@db-host:5432/jobdesk' make demo EMAIL=" in section
    row = next(line for line in README.splitlines() if line.startswith("| `jobdesk demo"))
    assert "the running server's `DATABASE_URL`" in row


def test_the_password_bounds_in_the_readme_are_the_rules() -> None:
    """The account page and the admins' create-user form both say how long a password may be."""
    from app.auth import MAX_PASSWORD_LENGTH, MIN_PASSWORD_LENGTH

    words = f"{MIN_PASSWORD_LENGTH} to {MAX_PASSWORD_LENGTH:,} characters"
    account = next(line for line in README.splitlines() if line.startswith("- **Password**"))
    users = next(line for line in README.splitlines() if line.startswith("- `/admin/users`"))
    assert words in account and words in users
