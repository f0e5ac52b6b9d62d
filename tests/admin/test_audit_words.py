"""Every action the audit trail records has words on ``/admin/audit`` and a place in its Action filter.

The actions are read from the source: every call that writes an audit entry (``audit.record`` and the
functions that pass their own ``action`` on to it, found here, not listed by hand), with the action
followed back to its literals (a literal, ``a if c else b``, a variable assigned those, a module-level
table looked up). An action built any other way fails the test, so none can slip past it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import asyncpg
from litestar.testing import AsyncTestClient
from markupsafe import escape

from app import audit
from app.auth import CurrentUser

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"


class _Module:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text(), str(path))
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        while node in self.parents:
            node = self.parents[node]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return node
        return None

    def top_level(self, name: str) -> ast.expr | None:
        for node in self.tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                return node.value
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == name
            ):
                return node.value
        return None


def _modules() -> list[_Module]:
    return [_Module(p) for p in sorted(APP.rglob("*.py"))]


def _callee(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "audit":
        return f"audit.{f.attr}"
    if isinstance(f, ast.Name):
        return f.id
    return None


def _argument(call: ast.Call, position: int | None, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    if position is not None and position < len(call.args):
        return call.args[position]
    return None


def _parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [a.arg for a in fn.args.posonlyargs + fn.args.args]


def _sinks(modules: list[_Module]) -> dict[str, tuple[int | None, str]]:
    """Callables whose ``action`` argument becomes an audit entry's action: ``audit.record`` and every
    function that passes one of its own parameters on as that argument (to a fixpoint)."""
    sinks: dict[str, tuple[int | None, str]] = {"audit.record": (None, "action")}
    changed = True
    while changed:
        changed = False
        for m in modules:
            for call in (n for n in ast.walk(m.tree) if isinstance(n, ast.Call)):
                name = _callee(call)
                if name not in sinks:
                    continue
                arg = _argument(call, *sinks[name])
                fn = m.function_of(call)
                if fn is None or not isinstance(arg, ast.Name) or fn.name in sinks:
                    continue
                params = _parameters(fn)
                kwonly = [a.arg for a in fn.args.kwonlyargs]
                if arg.id in params:
                    sinks[fn.name] = (params.index(arg.id), arg.id)
                    changed = True
                elif arg.id in kwonly:
                    sinks[fn.name] = (None, arg.id)
                    changed = True
    return sinks


def _values(m: _Module, expr: ast.expr, fn: ast.AST | None, where: str) -> Iterator[str]:
    """The literal actions ``expr`` can be."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        yield expr.value
    elif isinstance(expr, ast.IfExp):
        yield from _values(m, expr.body, fn, where)
        yield from _values(m, expr.orelse, fn, where)
    elif isinstance(expr, ast.Dict):
        for v in expr.values:
            yield from _values(m, v, fn, where)
    elif isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Name):
        table = m.top_level(expr.value.id)
        assert isinstance(table, ast.Dict), f"{where}: the action table {expr.value.id} is no dict literal"
        yield from _values(m, table, None, where)
    elif isinstance(expr, ast.Name):
        found = False
        if fn is not None:
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == expr.id for t in node.targets
                ):
                    found = True
                    yield from _values(m, node.value, fn, where)
        if not found:
            value = m.top_level(expr.id)
            assert value is not None, f"{where}: cannot follow the action {expr.id!r} back to its literals"
            yield from _values(m, value, None, where)
    else:
        raise AssertionError(
            f"{where}: an audit action built as {ast.unparse(expr)!r}; use a literal or a table"
        )


def written_actions() -> dict[str, str]:
    """Every audit action written anywhere in ``app/``, with where."""
    modules = _modules()
    sinks = _sinks(modules)
    found: dict[str, str] = {}
    for m in modules:
        for call in (n for n in ast.walk(m.tree) if isinstance(n, ast.Call)):
            name = _callee(call)
            if name not in sinks:
                continue
            arg = _argument(call, *sinks[name])
            fn = m.function_of(call)
            where = f"{m.path.relative_to(ROOT)}:{call.lineno}"
            assert arg is not None, f"{where}: {name} called without an action"
            if isinstance(arg, ast.Name) and fn is not None and fn.name in sinks:
                continue  # passed on from the function's caller, whose call is read instead
            for value in _values(m, arg, fn, where):
                found.setdefault(value, where)
    return found


def test_every_audited_action_has_words() -> None:
    actions = written_actions()
    # the reading reaches every path: the wrappers and the tables each action goes through
    assert {"job.cancel", "jobs.bulk_retry", "user.release_jobs", "account.password", "alerts.test"} <= set(
        actions
    )
    missing = {a: where for a, where in actions.items() if a not in audit.ACTIONS}
    assert not missing, f"audit actions without words in app.audit.ACTIONS: {missing}"
    unused = set(audit.ACTIONS) - set(actions)
    assert not unused, f"words for actions nothing records (the filter would offer them): {unused}"


async def test_audit_page_says_every_action_and_counts_in_words(
    client: AsyncTestClient, admin: CurrentUser, pg: asyncpg.Connection
) -> None:
    """Each action's words on the page and in the filter; a pipeline's cancel and a batch's retry link to
    what they acted on and say what their count counts."""
    root = admin
    pipeline = "0190a3b0-0000-7000-8000-000000000001"
    batch = "0190a3b0-0000-7000-8000-000000000002"
    for action in audit.ACTIONS:
        await pg.execute(
            "INSERT INTO audit_log (user_id, user_email, action, target_type, target_ids, count, outcome)"
            " VALUES ($1, 'root@example.com', $2, 'user', $3::jsonb, 1, 'ok')",
            root.id,
            action,
            f'["{root.id}"]',
        )
    await pg.execute(
        "INSERT INTO audit_log (user_id, user_email, action, target_type, target_ids, count, outcome)"
        " VALUES ($1, 'root@example.com', 'pipeline.cancel', 'pipeline', $2::jsonb, 2, 'ok'),"
        " ($1, 'root@example.com', 'batch.retry_failed', 'batch', $3::jsonb, 3, 'ok')",
        root.id,
        f'["{pipeline}"]',
        f'["{batch}"]',
    )
    page = (await client.get("/admin/audit")).text
    for action, words in audit.ACTIONS.items():
        assert str(escape(words.what)) in page, action
        assert f'<option value="{action}">{str(escape(words.what))}</option>' in page, action
    assert f'href="/pipelines/{pipeline}"' in page
    assert f'href="/batches/{batch}"' in page
    assert "2 jobs stopped" in page
    assert "3 rows retried" in page
    assert "and 1 more" not in page and "in all" not in page


def test_every_audit_entry_is_written_by_the_actions_layer() -> None:
    """Who did what is recorded where the action is decided (``app/actions``), once for every path:
    a page or an API handler that wrote its own entry would leave the same action unrecorded on the
    other path. Every call that writes an entry (``audit.record`` and the functions passing an action on
    to it) is made in ``app/actions`` or ``app/audit.py``; the one hook that audits a request refused
    before it reached its action (``app/web/refused_requests.py``) does it with the actions layer's own
    ``refused_once``."""
    modules = _modules()
    sinks = _sinks(modules)
    outside = [
        f"{m.path.relative_to(ROOT)}:{call.lineno} {name}"
        for m in modules
        for call in (n for n in ast.walk(m.tree) if isinstance(n, ast.Call))
        if (name := _callee(call)) in sinks
        and m.path.relative_to(APP).parts[0] != "actions"
        and m.path.name != "audit.py"
        and not (m.path.name == "refused_requests.py" and name == "refused_once")
    ]
    assert not outside, f"audit entries written outside the actions layer: {outside}"
