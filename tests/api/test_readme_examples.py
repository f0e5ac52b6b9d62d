"""The request bodies README.md shows are accepted as written: a reader copies them into curl."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.webkit import app_client, bearer

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def pipeline_examples() -> list[str]:
    """Every complete pipeline body in README.md: a ```json block or a curl ``-d`` to /api/pipelines
    (blocks with an ellipsis stand for a part of one and are left out)."""
    blocks = re.findall(r"```json\n(.*?)```", README, flags=re.S)
    curls = re.findall(r"-d '(\{[^']*\})' http://127\.0\.0\.1:8000/api/pipelines", README, flags=re.S)
    found = [b for b in blocks + curls if '"steps"' in b and "…" not in b]
    assert len(found) >= 2
    return found


@pytest.mark.parametrize("body", pipeline_examples(), ids=lambda b: json.loads(b)["name"])
async def test_every_pipeline_in_the_readme_starts(make_settings, db_url, body: str) -> None:
    async with app_client(make_settings(worker_enabled=False)) as client:
        _, h = await bearer(db_url, "readme@example.com", admin=True)  # the diamond uses `noop`
        answer = await client.post(
            "/api/pipelines", content=body, headers={**h, "Content-Type": "application/json"}
        )
        assert answer.status_code == 201, answer.text
