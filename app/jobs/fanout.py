"""One step per item (``for_each``) without the database: the checks, the ``$item`` substitution and the
expansion of a step into its instances.

A pipeline step may carry ``"for_each"``: a list, or ``{"$ref": "<step>.<field>"}`` naming a list in a
parent's result. The step then runs once per item, in parallel, as steps ``<key>[0]``, ``<key>[1]``, …
and there is no step ``<key>`` itself. In the step's ``input_data`` the value ``{"$item": ""}`` becomes
the item and ``{"$item": "name"}`` that field of an object item. Steps that depend on ``<key>`` wait for
every instance, and a ``{"$ref": "<key>.<field>"}`` in their input reads the instances' results as a
list, in item order.

A literal list is expanded when the pipeline is created. A ``$ref`` list is expanded in the transaction
that completes the last of the step's parents (:mod:`app.jobs.queue.fanouts`). An empty list skips the
step: nothing runs for it, its dependents do not wait for it, and a ``$ref`` to it reads ``[]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from app.errors import BadInput

INSTANCE_KEY = re.compile(r"^(?P<base>.+)\[(?P<index>\d+)\]$")


def instance_key(key: str, index: int) -> str:
    return f"{key}[{index}]"


def base_key(key: str) -> str | None:
    """``thumb`` for ``thumb[3]``; ``None`` for a key that is not an instance's."""
    m = INSTANCE_KEY.match(key)
    return m["base"] if m else None


def instance_number(key: str | None) -> int | None:
    """``3`` for ``thumb[3]``; ``None`` for a key that is not an instance's."""
    m = INSTANCE_KEY.match(key or "")
    return int(m["index"]) if m else None


def is_item(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"$item"}


LITERAL = "$literal"
"""``{"$literal": value}`` in a step's input is ``value`` as it is: nothing in it is read as a ``$ref`` or
an ``$item``. Every value put into a step's input from data (an item of a ``for_each`` list, a parent's
result read by a ``$ref``) is data, never a reference: only what the person wrote is resolved. An item is
substituted when its step is expanded but its step's ``$ref`` values only when it runs, so a marker-shaped
value in an item (``{"$ref": "other.secret"}`` in an HTTP response's body) is stored wrapped
(:func:`as_literal`) and unwrapped once, when the step runs (:func:`app.jobs.graph.resolve_refs`)."""
_MARKERS = frozenset({"$ref", "$item", LITERAL})


def is_literal(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {LITERAL}


def as_literal(value: Any) -> Any:
    """``value`` to be put into a step's input as data: each value shaped like a marker (``{"$ref": …}``,
    ``{"$item": …}``, ``{"$literal": …}``) wrapped in ``{"$literal": …}``; anything else as it is (so an
    ordinary item is stored, shown and checked as it is)."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in _MARKERS:
            return {LITERAL: value}
        return {k: as_literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_literal(v) for v in value]
    return value


def unwrap_literals(value: Any) -> Any:
    """``value`` with each ``{"$literal": v}`` replaced by ``v`` (not looked into)."""
    if isinstance(value, dict):
        if is_literal(value):
            return value[LITERAL]
        return {k: unwrap_literals(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_literals(v) for v in value]
    return value


def has_literals(value: Any) -> bool:
    """Whether ``value`` holds a ``{"$literal": …}`` anywhere."""
    if isinstance(value, dict):
        return is_literal(value) or any(has_literals(v) for v in value.values())
    if isinstance(value, list):
        return any(has_literals(v) for v in value)
    return False


def in_literal(value: Any, loc: Sequence[Any]) -> bool:
    """Whether the place ``loc`` (keys and indexes, as a schema's error names it) of ``value`` — a step's
    input as written — lies inside a ``{"$literal": …}``: what is there is data, whatever its shape. A
    ``loc`` that leaves ``value`` (a schema's own part, such as a union member's name) ends the walk."""
    for part in loc:
        if is_literal(value):
            return True
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
            value = value[part]
        else:
            return False
    return is_literal(value)


def has_items(value: Any) -> bool:
    """Whether ``value`` holds an ``{"$item": …}`` anywhere (not inside a ``{"$literal": …}``)."""
    if isinstance(value, dict):
        if is_literal(value):
            return False
        return is_item(value) or any(has_items(v) for v in value.values())
    if isinstance(value, list):
        return any(has_items(v) for v in value)
    return False


def item_marker(item: Any, path: str) -> str | None:
    """The path of an ``{"$item": …}`` inside ``item`` (``path`` being the item's), or ``None``."""
    if is_item(item):
        return path
    if is_literal(item):
        return None
    if isinstance(item, dict):
        found = (item_marker(v, f"{path}.{k}") for k, v in item.items())
    elif isinstance(item, list):
        found = (item_marker(v, f"{path}[{i}]") for i, v in enumerate(item))
    else:
        return None
    return next((f for f in found if f is not None), None)


def check_item(item: Any, path: str) -> None:
    """An item holds no ``{"$item": …}``: it is a value put into the step's input, and a marker in it
    would be put there as it is, to fail the step when it runs (the field's check is left until then,
    as for any ``$item`` field).

    Raises:
        BadInput: naming where in the item (``steps[1].for_each[0].u``).
    """
    where = item_marker(item, path)
    if where is not None:
        raise BadInput.field(
            where,
            'an item cannot hold {"$item": …}: an item is the value that replaces "$item" in the '
            "step's input_data, not a reference to another one",
        )


def substitute(value: Any, item: Any, path: str = "input_data") -> Any:
    """``value`` with each ``{"$item": ""}`` replaced by ``item`` and ``{"$item": "name"}`` by
    ``item["name"]``, as data (:func:`as_literal`): a marker-shaped value in the item is never read as a
    reference. ``path`` names the item (``steps[1].for_each[0]``, ``thumb[3]``). (A literal list's items
    are checked for ``$item`` markers when the pipeline is created, :func:`check_item`: one written
    there is a mistake worth naming; an item from a result is data, whatever it holds.)

    Raises:
        BadInput: a field asked of an item that is not an object or lacks it (``path``).
    """
    return _substituted(value, item, path)


def _substituted(value: Any, item: Any, path: str) -> Any:
    if is_item(value):
        name = value["$item"]
        if not isinstance(name, str):
            raise BadInput.field(path, '"$item" takes "" (the item) or the name of one of its fields')
        if name == "":
            return as_literal(item)
        if not isinstance(item, dict) or name not in item:
            raise BadInput.field(path, f"the item {_short(item)} has no field {name[:60]!r}")
        return as_literal(item[name])
    if is_literal(value):
        return value
    if isinstance(value, dict):
        return {k: _substituted(v, item, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_substituted(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _short(item: Any) -> str:
    text = repr(item)
    return text if len(text) <= 60 else text[:57] + "…"


REF_FORM = '"<step>.<field>"'
"""What a ``$ref`` takes: a step's key, a dot, and the path of a field of its result (``load.rows``,
``load.rows.0.name``)."""


def ref_problem(ref: Any) -> str | None:
    """What is wrong with the text of a ``{"$ref": ref}``, or ``None``: it is a step's key and a non-empty
    field path (no empty part: ``"a"``, ``"a."`` and ``"a..b"`` could only fail when the step runs).
    The one rule for every ``$ref`` a pipeline is made with — a step's input, a ``for_each`` list, a
    processor's next jobs — whichever path made it (API, form, template, schedule)."""
    if not isinstance(ref, str) or not ref:
        return f'"$ref" takes {REF_FORM}, the step being one it depends on'
    key, dot, path = ref.partition(".")
    if not key:
        return f'{ref[:100]!r} names no step: "$ref" takes {REF_FORM}'
    if not dot or not path or "" in path.split("."):
        return f'{ref[:100]!r} names no field of step {key[:64]!r}: "$ref" takes {REF_FORM}'
    return None


def source_of(for_each: Any) -> str | None:
    """The parent step key a ``{"$ref": "<step>.<field>"}`` list comes from; ``None`` for a literal."""
    if isinstance(for_each, dict) and set(for_each) == {"$ref"} and isinstance(for_each["$ref"], str):
        return for_each["$ref"].split(".", 1)[0]
    return None


def check_for_each(steps: Sequence[dict[str, Any]], prefix: str, max_items: int) -> None:
    """Each ``for_each`` is a list (at most ``max_items`` long, its items without ``{"$item": …}``:
    :func:`check_item`) or a ``$ref`` to a parent's field; an ``$item`` appears only in a step with
    ``for_each``.

    A ``$ref`` source that is not among the step's ``depends_on`` is added to it (the step cannot run
    before its list exists), so the graph check sees the edge and any cycle through it.

    Raises:
        BadInput: named by field path (``steps[2].for_each``).
    """
    for i, step in enumerate(steps):
        field = f"{prefix}[{i}].for_each"
        if "for_each" not in step:
            if has_items(step.get("input_data")):
                raise BadInput.field(
                    f"{prefix}[{i}].input_data", '"$item" is only allowed in a step with "for_each"'
                )
            continue
        value = step["for_each"]
        source = source_of(value)
        if source is not None:
            if (problem := ref_problem(value["$ref"])) is not None:
                raise BadInput.field(field, problem)
            if source == step.get("key"):
                raise BadInput.field(field, f"dependency cycle: {source} → {source} (its own result)")
            deps = step.get("depends_on") or []
            if isinstance(deps, list) and source not in deps:
                step["depends_on"] = [*deps, source]
        elif not isinstance(value, list):
            raise BadInput.field(field, 'must be a list, or {"$ref": "<step>.<field>"} naming a list')
        elif max_items and len(value) > max_items:
            raise BadInput.field(
                field, f"has {len(value):,} items; a pipeline may have at most {max_items:,} steps"
            )
        else:
            for n, item in enumerate(value):
                check_item(item, f"{field}[{n}]")


def expand_literal(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps with each literal ``for_each`` step replaced by its instances (keys ``<key>[i]``,
    ``$item`` substituted) and each dependency on it by dependencies on every instance. A step with an
    empty list disappears, and ``{"$ref": "<key>…"}`` values in its dependents read ``[]``. Steps with a
    ``$ref`` list are returned as they are.

    Raises:
        BadInput: an ``$item`` field the item does not have (``steps[i].for_each[n]``).
    """
    instances: dict[str, list[str]] = {}
    out: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        value = step.get("for_each")
        if not isinstance(value, list):
            out.append(step)
            continue
        key = step["key"]
        instances[key] = [instance_key(key, n) for n in range(len(value))]
        base = {k: v for k, v in step.items() if k != "for_each"}
        for n, item in enumerate(value):
            out.append(
                {
                    **base,
                    "key": instance_key(key, n),
                    "input_data": substitute(step.get("input_data") or {}, item, f"steps[{i}].for_each[{n}]"),
                }
            )
    if not instances:
        return list(steps)
    return [rewire(s, instances) for s in out]


def rewire(step: dict[str, Any], instances: dict[str, list[str]]) -> dict[str, Any]:
    """``step`` depending on every instance of each expanded key it depended on; its ``$ref`` values
    to an expanded key without instances read ``[]``."""
    deps = step.get("depends_on") or []
    if not any(d in instances for d in deps):
        return step
    new_deps: list[str] = []
    for d in deps:
        new_deps.extend(instances.get(d, [d]))
    empty = {k for k, v in instances.items() if not v and k in deps}
    data = step.get("input_data") or {}
    return {**step, "depends_on": new_deps, "input_data": empty_refs(data, empty) if empty else data}


def empty_refs(value: Any, keys: set[str]) -> Any:
    """``value`` with each ``{"$ref": "<key>…"}`` to one of ``keys`` replaced by ``[]``."""
    if isinstance(value, dict):
        if set(value) == {"$ref"} and isinstance(value["$ref"], str):
            return [] if value["$ref"].split(".", 1)[0] in keys else value
        if is_literal(value):
            return value
        return {k: empty_refs(v, keys) for k, v in value.items()}
    if isinstance(value, list):
        return [empty_refs(v, keys) for v in value]
    return value


def group_instances(parents: dict[str, Any]) -> dict[str, list[Any]]:
    """The parents' results of instance steps, as one list per base key in item order."""
    grouped: dict[str, list[tuple[int, Any]]] = {}
    for key, result in parents.items():
        m = INSTANCE_KEY.match(key)
        if m:
            grouped.setdefault(m["base"], []).append((int(m["index"]), result))
    return {k: [r for _, r in sorted(v, key=lambda p: p[0])] for k, v in grouped.items()}
