"""README.md documents every setting in one table, with its default, and gives the first commands."""

from __future__ import annotations

import re
from pathlib import Path

from app.settings import ENV_NAMES

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_every_setting_is_in_the_configuration_table() -> None:
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]+) \| ([^|]+) \|$", section, flags=re.M)
    documented = {name for name, _, _ in rows}
    assert sorted(set(ENV_NAMES.values()) - documented) == []
    assert sorted(documented - set(ENV_NAMES.values())) == []
    assert all(default.strip() and meaning.strip() for _, default, meaning in rows)


def test_readme_gives_the_two_commands_and_the_first_admin() -> None:
    assert "make run" in README and "make test" in README
    assert "jobdesk create-user you@example.com --admin" in README
    assert "## At-least-once" in README
