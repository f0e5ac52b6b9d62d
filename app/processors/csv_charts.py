"""The HTML report of a CSV summary: SVG charts (filled and missing values, histograms, most common
values) and one self-contained page.

Every text of the file that reaches the page is escaped: Jinja2 autoescapes the page, and every text in
the generated SVG goes through :func:`markupsafe.escape`. The page carries a Content-Security-Policy that
forbids scripts, and needs nothing from outside (inline CSS, inline SVG).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from markupsafe import Markup, escape

from app.formatting import in_zone, zone

BAR = "#2f6f9f"
MISS = "#d98b3a"


def _svg(width: int, height: int, label: str, body: list[str]) -> Markup:
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">' + "".join(body) + "</svg>"
    )


def _short(text: Any, n: int = 28) -> str:
    s = str(text)
    return s if len(s) <= n else s[: n - 1] + "…"


def chart_missing(columns: list[dict[str, Any]]) -> Markup:
    """Horizontal stacked bars: filled and missing values per column."""
    row_h, left, width = 22, 190, 640
    height = 30 + row_h * len(columns)
    total = max((c["count"] + c["missing"] for c in columns), default=1) or 1
    span = width - left - 100
    body = [
        f'<text x="{left}" y="14" font-size="12" fill="#333"><tspan fill="{BAR}">■</tspan> filled</text>',
        f'<text x="{left + 70}" y="14" font-size="12" fill="#333"><tspan fill="{MISS}">■</tspan> missing</text>',
    ]
    for i, c in enumerate(columns):
        y = 24 + i * row_h
        filled = span * c["count"] / total
        missing = span * c["missing"] / total
        body.append(
            f'<text x="{left - 8}" y="{y + 14}" font-size="12" text-anchor="end" fill="#222">'
            f"{escape(_short(c['name']))}</text>"
        )
        body.append(f'<rect x="{left}" y="{y + 3}" width="{filled:.1f}" height="{row_h - 8}" fill="{BAR}"/>')
        if c["missing"]:
            body.append(
                f'<rect x="{left + filled:.1f}" y="{y + 3}" width="{missing:.1f}" height="{row_h - 8}" fill="{MISS}"/>'
            )
        body.append(
            f'<text x="{left + filled + missing + 6:.1f}" y="{y + 14}" font-size="11" fill="#555">'
            f"{c['missing']} missing</text>"
        )
    return _svg(width, height, "Filled and missing values per column", body)


def chart_histogram(col: dict[str, Any]) -> Markup:
    """Vertical bars of a numeric column's histogram, with the range under it."""
    bins = col["histogram"]
    width, height, bottom = 320, 150, 24
    peak = max(b["count"] for b in bins) or 1
    bar_w = (width - 20) / len(bins)
    body = []
    for i, b in enumerate(bins):
        h = (height - bottom - 10) * b["count"] / peak
        x = 10 + i * bar_w
        body.append(
            f'<rect x="{x + 1:.1f}" y="{height - bottom - h:.1f}" width="{max(bar_w - 2, 1):.1f}" '
            f'height="{h:.1f}" fill="{BAR}"><title>{escape(b["from"])} to {escape(b["to"])}: '
            f"{b['count']}</title></rect>"
        )
    body.append(f'<text x="10" y="{height - 6}" font-size="11" fill="#444">{escape(col["min"])}</text>')
    body.append(
        f'<text x="{width - 10}" y="{height - 6}" font-size="11" fill="#444" text-anchor="end">'
        f"{escape(col['max'])}</text>"
    )
    return _svg(width, height, f"Distribution of {col['name']}", body)


def chart_top(col: dict[str, Any]) -> Markup:
    """Horizontal bars of a text column's most common values."""
    values = col.get("top_values") or []
    row_h, left, width = 20, 150, 320
    height = 8 + row_h * max(len(values), 1)
    peak = max((v["count"] for v in values), default=1) or 1
    body = []
    for i, v in enumerate(values):
        y = 4 + i * row_h
        w = (width - left - 40) * v["count"] / peak
        body.append(
            f'<text x="{left - 6}" y="{y + 13}" font-size="11" text-anchor="end" fill="#222">'
            f"{escape(_short(v['value'], 22))}</text>"
        )
        body.append(f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" fill="{BAR}"/>')
        body.append(
            f'<text x="{left + w + 4:.1f}" y="{y + 13}" font-size="11" fill="#555">{v["count"]}</text>'
        )
    return _svg(width, height, f"Most common values of {col['name']}", body)


REPORT_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d1d1b; margin: 0 auto;
       max-width: 980px; padding: 24px 16px 48px; }
h1 { font-size: 1.6em; margin: 0 0 4px; } h2 { font-size: 1.2em; margin: 0 0 6px; }
.meta { color: #555; margin: 0 0 20px; }
section.col { border: 1px solid #ddd; border-radius: 8px; padding: 14px 16px; margin: 14px 0;
              display: flex; flex-wrap: wrap; gap: 16px 28px; }
section.col > div { flex: 1 1 300px; min-width: 0; }
table { border-collapse: collapse; } td, th { text-align: left; padding: 2px 12px 2px 0; vertical-align: top; }
th { font-weight: 600; color: #444; } .type { color: #2f6f9f; font-weight: 600; }
.note { background: #fff7e6; border: 1px solid #f0d9a8; padding: 8px 12px; border-radius: 6px; }
svg { max-width: 100%; height: auto; } .overview { overflow-x: auto; }
code { background: #f2f2f0; padding: 0 4px; border-radius: 3px; overflow-wrap: anywhere; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
<p class="meta">{{ overview }} Read as {{ encoding }}, separated by {{ delimiter }},
{% if header == "yes" %}with{% else %}without{% endif %} a header line. Made by Jobdesk on {{ made }}.</p>
{% for note in notes %}<p class="note">{{ note }}</p>{% endfor %}
<h2>Filled and missing values</h2>
<div class="overview">{{ missing_chart }}</div>
<p class="meta">Counted as missing: empty cells and {{ missing_words }}.</p>
{% for c in columns %}
<section class="col">
  <div>
    <h2>{{ c.name }}</h2>
    <p><span class="type">{{ c.type }}</span> · {{ c.count }} filled · {{ c.missing }} missing · {{ c.distinct }} different</p>
    <table>
    {% if c.min is defined %}
      <tr><th>Lowest</th><td>{{ c.min }}</td></tr><tr><th>Highest</th><td>{{ c.max }}</td></tr>
      <tr><th>Mean</th><td>{{ c.mean }}</td></tr><tr><th>Median</th><td>{{ c.median }}</td></tr>
    {% endif %}
    {% if c.earliest is defined %}
      <tr><th>Earliest</th><td>{{ c.earliest }}</td></tr><tr><th>Latest</th><td>{{ c.latest }}</td></tr>
    {% endif %}
    {% if c.top_values is defined %}
      {% for v in c.top_values %}<tr><td><code>{{ v.value }}</code></td><td>{{ v.count }}</td></tr>{% endfor %}
    {% endif %}
    {% if c.examples %}<tr><th>Examples</th><td>{% for e in c.examples %}<code>{{ e }}</code> {% endfor %}</td></tr>{% endif %}
    </table>
    {% if c.distinct_note is defined %}<p class="note">{{ c.distinct_note }}</p>{% endif %}
  </div>
  {% if c.chart %}<div>{{ c.chart }}</div>{% endif %}
</section>
{% endfor %}
</body>
</html>
"""


def made_words(made: datetime, tz: str) -> str:
    """When a report was made, in its owner's zone ``tz`` with the zone's name, so that it reads the same
    wherever it is opened: ``2026-12-08 09:30 CET (Europe/Berlin)``; ``2026-12-08 08:30 UTC`` in UTC."""
    local = in_zone(made, zone(tz))
    named = "" if tz == local.tzname() else f" ({tz})"
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}{named}"


def render_report(summary: dict[str, Any], missing_words: str, made: datetime, tz: str = "UTC") -> str:
    """The self-contained HTML report of a summary (as returned by ``report.csv_summary``): inline CSS
    and SVG charts, no script, every value escaped (Jinja2 autoescape; SVG text via :func:`escape`).
    ``missing_words`` lists what counted as missing; ``made`` is when (on the database's clock: stamped
    with the worker host's clock and zone, one report read another time and zone on each host that made
    it), said in ``tz``, the owner's zone, with its name (:func:`made_words`)."""
    # Imported here: every worker loads this module at start to learn its job types, and Jinja2 cost
    # about a tenth of a second of that start (measured with bench/startup.py), for reports few run.
    import jinja2

    env = jinja2.Environment(autoescape=True)
    columns = []
    for c in summary["columns"]:
        c = dict(c)
        if c.get("histogram"):
            c["chart"] = chart_histogram(c)
        elif c.get("top_values"):
            c["chart"] = chart_top(c)
        columns.append(c)
    return env.from_string(REPORT_TEMPLATE).render(
        title=summary.get("title") or "CSV summary",
        overview=summary.get("overview", ""),
        encoding=summary.get("encoding", "?"),
        delimiter=f"{summary.get('delimiter', 'comma')}s",
        header=summary.get("header", "yes"),
        notes=summary.get("notes") or [],
        made=made_words(made, tz),
        missing_chart=chart_missing(summary["columns"]),
        missing_words=missing_words,
        columns=columns,
    )
