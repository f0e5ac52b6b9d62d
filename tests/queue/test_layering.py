"""The import graph of ``app/``: no import cycles, and the job core (``app/jobs/**``) depends on nothing
above it.

Read from the source with ``ast`` — every ``import`` counts, also one inside a function (an import
moved into a function to dodge a cycle is still that cycle), except those under
``if TYPE_CHECKING:``, which never run. Importing ``a.b.c`` also imports the packages ``a.b`` and ``a``
(their ``__init__`` runs first), so those count too, except for a module inside that package: its
package is already being imported when it is.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"

FOUNDATION = {
    "app.settings",
    "app.db",
    "app.dbclock",
    "app.models",
    "app.errors",
    "app.logs",
    "app.metrics",
    "app.files",
    "app.file_types",
    "app.storage_limit",
    "app.formatting",
    "app.digits",
    "app.emails",
    "app.text_encoding",
}
"""What the job core may use besides ``app.jobs.*`` (and the ``app`` package itself)."""

NO_FUNCTION_LEVEL_IMPORTS = ["app/jobs", "app/pipelines.py", "app/controls.py", "app/schedules.py"]
"""Files where an app module is imported only at the top: nothing there needs to dodge a cycle."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in APP.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, *, in_function: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement that runs, with whether it is inside a function."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (item for child in node.orelse for item in _imports_of(child, in_function))
            continue
        yield from _imports_of(node, in_function)


def _imports_of(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.stmt, bool]]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node, in_function
        return
    inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
    yield from _imports(node, in_function=inner)


def _package_of(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _targets(module: str, node: ast.stmt) -> set[str]:
    """The app modules an import statement in ``module`` names (not yet their packages)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in MODULES}
    assert isinstance(node, ast.ImportFrom)
    base = node.module or ""
    if node.level:
        package = _package_of(module).split(".")
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    named = {f"{base}.{a.name}" for a in node.names}
    return ({base} if base in MODULES else set()) | (named & MODULES.keys())


def _with_packages(module: str, targets: set[str]) -> set[str]:
    """``targets`` and the packages above them that importing them runs — except ``module``'s own."""
    out = set()
    for target in targets:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            inside = module == name or module.startswith(name + ".")
            if name in MODULES and (name == target or not inside):
                out.add(name)
    out.discard(module)
    return out


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        for node, _ in _imports(tree):
            targets |= _targets(module, node)
        graph[module] = _with_packages(module, targets)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _path_within(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through ``component``'s first module, as a readable path ``a → b → a``."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    return component


def test_no_import_cycles_among_app_modules() -> None:
    graph = import_graph()
    found = cycles(graph)
    report = "\n".join(" → ".join(_path_within(graph, c)) + f"   (all of: {', '.join(c)})" for c in found)
    assert not found, f"{len(found)} import cycle(s) among app modules:\n{report}"


def test_the_job_core_imports_only_the_foundation() -> None:
    offenders = []
    for module, path in sorted(MODULES.items()):
        if module != "app.jobs" and not module.startswith("app.jobs."):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):  # TYPE_CHECKING imports too: the core names nothing above it
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _targets(module, node):
                if target not in FOUNDATION and target != "app.jobs" and not target.startswith("app.jobs."):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {target}")
    assert offenders == []


def test_no_function_level_imports_of_app_modules_in_the_core() -> None:
    files = [
        p
        for entry in NO_FUNCTION_LEVEL_IMPORTS
        for p in sorted((ROOT / entry).rglob("*.py")) or [ROOT / entry]
    ]
    offenders = []
    for path in files:
        module = next(m for m, p in MODULES.items() if p == path)
        for node, in_function in _imports(ast.parse(path.read_text(), str(path))):
            if in_function and _targets(module, node):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_the_checks_would_catch_what_they_look_for() -> None:
    # Negative controls: a two-module cycle, a cycle through a package's __init__, and a hidden import.
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    hidden = ast.parse("def f():\n    from app.jobs import queue\nif TYPE_CHECKING:\n    import app.db\n")
    assert [(type(n).__name__, inside) for n, inside in _imports(hidden)] == [("ImportFrom", True)]
    assert _with_packages("app.pipelines", {"app.jobs.queue.pipelines"}) == {
        "app.jobs",
        "app.jobs.queue",
        "app.jobs.queue.pipelines",
    }
    assert _with_packages("app.jobs.queue.outcomes", {"app.jobs.queue.common"}) == {"app.jobs.queue.common"}
