"""Litestar appends ``; charset=utf-8`` to every ``text/`` media type a response names, so a media type
that names its charset itself went out as ``text/csv; charset=utf-8; charset=utf-8`` (a batch's
``results.csv``, a job's ``log.txt``). No response in the web layer names one."""

from __future__ import annotations

import re
from pathlib import Path

WEB = Path(__file__).resolve().parents[2] / "app" / "web"


def test_no_response_names_the_charset_litestar_adds() -> None:
    doubled = [
        f"{path.relative_to(WEB.parent.parent)}:{n}"
        for path in sorted(WEB.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"media_type=[\"']text/[^\"']*charset", line)
    ]
    assert doubled == []
