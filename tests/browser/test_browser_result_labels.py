"""A result's fields read as words a person expects, in a real browser at phone width: "URL", not
"Url"; "Elapsed" with "1.2 s", not "Elapsed ms" with "1234"; a size in bytes as "Body size: 1.5 KiB";
table columns the same way. (A processor's ``snake_case`` keys name them; ``test.echo`` returns its
input as its result.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.browser import BROWSER_MARKS, Watch, no_horizontal_scroll, sign_in
from tests.support.webkit import admin_server_with_worker

pytestmark = BROWSER_MARKS


@pytest.fixture
def server(db_url: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    with admin_server_with_worker(db_url, tmp_path / "data", "tests.support.processors") as served:
        yield served


def test_result_labels_are_words_and_values_carry_their_unit(
    server: tuple[str, str], browser: Any, artifacts_dir: Path
) -> None:
    base, token = server
    result = {
        "url": "https://example.com/a",
        "ok": True,
        "elapsed_ms": 1234,
        "body_bytes": 1536,
        "job_id": "A-17",
        "variants": [{"size": 160, "bytes": 2048, "final_url": "https://example.com/b"}],
    }
    r = httpx.post(
        base + "/api/jobs",
        json={"type": "test.echo", "input_data": result},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 201, r.text
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)
    watch = Watch(page)
    sign_in(page, base)
    page.goto(f"{base}/jobs/{r.json()['id']}")
    page.locator("#job-status .status-head .status", has_text="Done").wait_for(timeout=30_000)

    rows = page.locator("#result dl.fields > .field-row")
    shown = {
        rows.nth(i).locator("dt").inner_text(): rows.nth(i).locator("dd").inner_text()
        for i in range(rows.count())
    }
    assert shown["URL"] == "https://example.com/a"
    assert shown["OK"] == "Yes"
    assert shown["Elapsed"] == "1.2 s"
    assert shown["Body size"] == "1.5 KiB"
    assert shown["Job ID"] == "A-17"
    columns = page.locator("#result table.result-table th").all_inner_texts()
    assert columns == ["Size", "Bytes", "Final URL"]
    assert page.locator("#result table.result-table td").all_inner_texts()[:2] == ["160", "2 KiB"]
    # the input (no form: test.echo takes any object) reads the same way
    asked = page.locator("section.input dl.fields > .field-row dt").all_inner_texts()
    assert {"URL", "Elapsed", "Body size", "Job ID"} <= set(asked)
    assert no_horizontal_scroll(page)
    page.screenshot(path=str(artifacts_dir / "result-labels-390.png"), full_page=True)
    assert not watch.errors and not watch.alerts
