"""A macro that shows a time in the viewer's zone reads the viewer from the template's context: imported
without ``with context`` it sees no viewer, and every time it shows is in UTC. The approvals page, its
rows and the job page's decisions showed "rejected 6 Dec 2026, 18:18 UTC" to a viewer in Berlin while the
rest of the page read CET. Every import of a macro that uses a filter reading the context must carry it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from litestar.plugins.jinja import JinjaTemplateEngine

from app.web import register_filters

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
IMPORT = re.compile(r"{%-?\s*from\s+[\"']([^\"']+)[\"']\s+import\s+(.+?)\s*-?%}", re.S)
MACRO = re.compile(r"{%-?\s*macro\s+(\w+)\s*\((.*?){%-?\s*endmacro\s*-?%}", re.S)


def context_filters() -> set[str]:
    """The filters installed for the pages that read the template's context (the viewer's zone)."""
    engine = JinjaTemplateEngine(directory=TEMPLATES)
    register_filters(engine)
    filters: dict[str, Any] = engine.engine.filters
    return {name for name, f in filters.items() if str(getattr(f, "jinja_pass_arg", "")).endswith("context")}


def macros_using(path: Path, names: set[str]) -> set[str]:
    """The macros of ``path`` whose body uses one of the filters ``names``."""
    used = re.compile(r"\|\s*(" + "|".join(map(re.escape, sorted(names))) + r")\b")
    return {m.group(1) for m in MACRO.finditer(path.read_text()) if used.search(m.group(2))}


def test_every_import_of_a_macro_that_reads_the_viewer_carries_the_context() -> None:
    names = context_filters()
    assert {"localtime", "clock"} <= names
    wrong = []
    for template in sorted(TEMPLATES.rglob("*.html")):
        for source, imported in IMPORT.findall(template.read_text()):
            if imported.rstrip().endswith("with context"):
                continue
            wanted = {n.strip() for n in imported.split(",")}
            needing = wanted & macros_using(TEMPLATES / source, names)
            if needing:
                wrong.append((str(template.relative_to(TEMPLATES)), source, sorted(needing)))
    assert wrong == []
