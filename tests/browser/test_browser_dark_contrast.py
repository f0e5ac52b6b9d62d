"""Text contrast in dark colours, in headless Chromium against ``jobdesk serve``: every piece of text on a
job's page and in the approvals inbox reads at least 4.5:1 against what is behind it (3:1 when large), as
WCAG AA asks, whether dark comes from the device (``prefers-color-scheme``) or from the person's choice on
/account. Pico's dark muted grey read 4.4:1 on a card's header: "Scheduled for …" on a waiting job, a
pipeline's "2 of 4 steps", the job type beside a step in the inbox."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from app.db import asyncpg_dsn
from app.jobs.queue import new_id
from tests.support.browser import BROWSER_MARKS, sign_in
from tests.support.webkit import add_user, running_server

pytestmark = BROWSER_MARKS

# Each element with text of its own: its colour over the backgrounds behind it (blended down to the
# first opaque one), and the ratio WCAG defines; those under what their size needs.
LOW_CONTRAST = """(() => {
  const parse = c => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const over = (top, under) => top.slice(0, 3).map((v, i) => v * top[3] + under[i] * (1 - top[3])).concat(1);
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const behind = el => { const layers = []; for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c[3] > 0) layers.push(c); if (c && c[3] >= 1) break; }
    let base = [255, 255, 255, 1]; if (!layers.length || layers[layers.length - 1][3] < 1) base = parse(getComputedStyle(document.documentElement).backgroundColor) || base;
    for (let i = layers.length - 1; i >= 0; i--) base = over(layers[i], base); return base; };
  const low = [];
  for (const el of document.querySelectorAll('main *')) {
    if (!el.getClientRects().length || ![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
    const cs = getComputedStyle(el); if (cs.visibility === 'hidden') continue;
    const bg = behind(el), fg = over(parse(cs.color), bg);
    const a = lum(fg), b = lum(bg), ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const size = parseFloat(cs.fontSize), large = size >= 24 || (+cs.fontWeight >= 700 && size >= 18.66);
    if (ratio < (large ? 3 : 4.5)) low.push(`${ratio.toFixed(2)}:1 "${el.textContent.trim().slice(0, 40)}" (${cs.color})`);
  }
  return low;
})()"""


async def _seed(db_url: str) -> dict[str, Any]:
    root = await add_user(db_url, "root@example.com", admin=True)
    await add_user(db_url, "dana@example.com", admin=True)
    conn = await asyncpg.connect(asyncpg_dsn(db_url))
    waiting, step = new_id(), new_id()
    try:
        await conn.execute("UPDATE users SET theme = 'dark' WHERE email = 'dana@example.com'")
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title, run_at)"
            " VALUES ($1, 'noop', 'queued', $2, '{}', 1, 'Weekly report', now() + interval '1 day')",
            waiting,
            root.id,
        )
        await conn.execute(
            "INSERT INTO jobs (id, type, status, user_id, input_data, max_attempts, title, requires_approval,"
            " result_data, started_at) VALUES ($1, 'noop', 'waiting_approval', $2, '{}', 1, 'Press release',"
            " true, '{\"words\": 420}', now())",
            step,
            root.id,
        )
    finally:
        await conn.close()
    return {"waiting": waiting}


@pytest.fixture
def seeded_server(db_url: str, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    data = asyncio.run(_seed(db_url))
    with running_server(db_url, tmp_path / "data", LOG_LEVEL="WARNING") as base:
        yield base, data


@pytest.mark.parametrize(
    ("email", "scheme"),
    [("root@example.com", "dark"), ("dana@example.com", "light")],
    ids=["device", "chosen"],
)
def test_text_reads_well_in_dark_colours(
    seeded_server: tuple[str, dict[str, Any]], browser: Any, artifacts_dir: Path, email: str, scheme: str
) -> None:
    base, data = seeded_server
    context = browser.new_context(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    sign_in(page, base, email)
    for path in (f"/jobs/{data['waiting']}", "/admin/approvals"):
        page.goto(base + path)
        assert page.evaluate("getComputedStyle(document.documentElement).colorScheme") == "dark"
        low = page.evaluate(LOW_CONTRAST)
        assert low == [], f"{path} in dark colours: {low}"
    page.screenshot(path=str(artifacts_dir / f"dark-contrast-{email.split('@')[0]}.png"))
    context.close()
