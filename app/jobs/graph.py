"""Pipeline graphs without the database: step keys and dependencies checked, steps put in order, step
inputs validated, ``$ref`` values resolved, and a processor's next jobs checked before they are made.

Checks: unique, well-formed keys; every ``depends_on`` names a step of the same spec (or, for next
jobs, an existing job of the same pipeline and owner); no cycle — a step depending on itself included
— reported with its path (``a → b → a``); every step's type and input valid. New jobs only ever get
edges to jobs that already exist or are created with them, so no path can add a cycle to an existing
graph.

A step's input may take a value from a parent's result at run time: ``{"$ref": "<parent key>.<field>"}``
anywhere in its ``input_data`` is replaced, just before the step runs, by that field of the parent's
``result_data`` (the worker resolves it with :func:`resolve_refs`; such fields are not schema-checked
when the pipeline is created). The value read is data: it is put in as it is, never looked into for
more references, and so is a ``for_each`` item (``{"$literal": …}``, :data:`app.jobs.fanout.LITERAL`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from app.digits import whole
from app.errors import BadInput
from app.jobs.fanout import (
    LITERAL,
    base_key,
    group_instances,
    has_items,
    has_literals,
    in_literal,
    is_literal,
    ref_problem,
    unwrap_literals,
)
from app.jobs.input_words import (
    field_named,
    item_words,
    next_job_check_words,
    next_job_label,
    next_job_parents_words,
    next_job_words,
    run_time_words,
)
from app.jobs.payload import check_input
from app.jobs.types import NextJob, PermanentError, errors_in_words, registry, type_shown, validation_errors
from app.settings import Settings

KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
"""A step key. No ``.``: ``{"$ref": "<step>.<field>"}`` ends the step's key at the first dot, so a step
``x.y`` could never be read, and beside a step ``x`` the reference would be ambiguous."""
MAX_STEPS = 1000


def find_cycle(nodes: Sequence[str], edges: dict[str, list[str]]) -> list[str] | None:
    """A cycle as a list of keys (first repeated at the end), or ``None``."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(nodes, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        color[node] = grey
        stack.append(node)
        for dep in edges.get(node, []):
            if dep not in color:
                continue
            if color[dep] == grey:
                return [*stack[stack.index(dep) :], dep]
            if color[dep] == white:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        color[node] = black
        return None

    for n in nodes:
        if color[n] == white:
            found = visit(n)
            if found:
                return found
    return None


def check_key(key: Any, field: str) -> str:
    """A step key as :data:`KEY_PATTERN` has it: a pipeline's step, a template's, a processor's next job.

    Raises:
        BadInput: on ``field``, saying what a key may hold (and why not a dot, for a key with one).
    """
    if isinstance(key, str) and KEY_PATTERN.match(key):
        return key
    if isinstance(key, str) and "." in key and KEY_PATTERN.match(key.replace(".", "-")):
        raise BadInput.field(
            field,
            'must not contain \'.\': {"$ref": "<step>.<field>"} ends the step\'s key at its first dot, so no '
            "step could read this one's result (use '-' or '_' instead)",
        )
    # "letters" alone read as any letter, and a key like "ä" or "шаг" was refused by words that allowed it
    raise BadInput.field(
        field,
        "must be 1–64 of the characters a–z, A–Z, 0–9, '_' and '-' (no accented or other letters), "
        "starting with a letter or digit",
    )


def _check_keys(steps: Sequence[dict[str, Any]], prefix: str) -> list[str]:
    keys: list[str] = []
    for i, step in enumerate(steps):
        key = check_key(step.get("key"), f"{prefix}[{i}].key")
        if key in keys:
            raise BadInput.field(f"{prefix}[{i}].key", f"duplicate step key {key!r}")
        keys.append(key)
    return keys


def _check_dependencies(step: dict[str, Any], field: str, known: set[str]) -> list[str]:
    deps = step.get("depends_on") or []
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise BadInput.field(field, "must be a list of step keys")
    for d in deps:
        if d == step["key"]:
            raise BadInput.field(field, f"dependency cycle: {d} → {d} (a step cannot depend on itself)")
        if d not in known:
            raise BadInput.field(field, f"unknown dependency {d!r}")
    return list(dict.fromkeys(deps))


def check_graph(steps: Sequence[dict[str, Any]], prefix: str, *, external: set[str] | None = None) -> None:
    """Keys unique and well-formed, dependencies known, no cycle.

    Raises:
        BadInput: naming the field path and, for a cycle, the path ``a → b → a``.
    """
    if not steps:
        raise BadInput.field(prefix, "a pipeline needs at least one step")
    if len(steps) > MAX_STEPS:
        raise BadInput.field(prefix, f"a pipeline can have at most {MAX_STEPS:,} steps")
    keys = _check_keys(steps, prefix)
    known = set(keys) | (external or set())
    edges = {
        step["key"]: _check_dependencies(step, f"{prefix}[{i}].depends_on", known)
        for i, step in enumerate(steps)
    }
    cycle = find_cycle(keys, edges)
    if cycle:
        raise BadInput.field(prefix, "dependency cycle: " + " → ".join(cycle))


def topo_order(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Steps with every parent before its children (insertion order otherwise)."""
    by_key = {s["key"]: s for s in steps}
    seen: set[str] = set()
    order: list[dict[str, Any]] = []

    def add(s: dict[str, Any]) -> None:
        if s["key"] in seen:
            return
        seen.add(s["key"])
        for d in s.get("depends_on") or []:
            if d in by_key:
                add(by_key[d])
        order.append(s)

    for s in steps:
        add(s)
    return order


# --- step inputs and $ref -----------------------------------------------------------------------------


def has_refs(value: Any) -> bool:
    """Whether ``value`` holds a ``{"$ref": …}`` anywhere (not inside a ``{"$literal": …}``)."""
    if isinstance(value, dict):
        if is_literal(value):
            return False
        return set(value) == {"$ref"} or any(has_refs(v) for v in value.values())
    if isinstance(value, list):
        return any(has_refs(v) for v in value)
    return False


def validate_step_input(
    type_: Any,
    input_data: Any,
    path: str,
    settings: Settings,
    *,
    next_job: str | None = None,
    item: int | None = None,
) -> dict[str, Any]:
    """Validate one step's input against its type; fields holding a ``{"$ref": …}`` (or an ``{"$item":
    …}`` not yet replaced) are checked at run time instead. Returns the input to store. ``next_job``: the
    step is a processor's next job, so labelled (:func:`~app.jobs.input_words.next_job_label`), and its
    problems are worded for what a processor wrote, not for a person at a form; ``item``: the step is
    the instance for item ``item`` (from 0) of a ``for_each`` list read from a parent's result, worded
    for what that result gave (:func:`~app.jobs.input_words.item_words`).

    Raises:
        BadInput: unknown type, or a bad field (named by its full path).
        TooLarge: the input is above ``JOB_MAX_INPUT_BYTES``.
    """
    spec = registry.get(type_) if isinstance(type_, str) else None
    if spec is None:
        raise BadInput.field(path.rsplit(".", 1)[0] + ".type", f"unknown job type {type_shown(type_)}")
    check_input(input_data, settings.job_max_input_bytes, field=path)
    ref_fields = {k for k, v in input_data.items() if has_refs(v) or has_items(v)}
    words = _words_for(next_job, item)
    if not ref_fields and not has_literals(input_data):
        if words is None:
            return spec.validate_input(input_data, field_prefix=path)
        try:
            return dict(spec.input_model.model_validate(input_data).model_dump(mode="json"))
        except ValidationError as exc:
            raise _worded_refusal(exc.errors(), path, spec, words) from None
    # Data wrapped as literal is checked as the step will read it, and stored wrapped.
    plain = unwrap_literals(input_data)
    try:
        spec.input_model.model_validate({k: v for k, v in plain.items() if k not in ref_fields})
    except ValidationError as exc:
        errors = [
            e for e in exc.errors() if not (e["type"] == "missing" and e["loc"] and e["loc"][0] in ref_fields)
        ]
        if errors:
            # what the person wrote inside a literal is data: refused as such, never as a marker
            in_input = functools.partial(in_literal, input_data)
            if words is not None:
                raise _worded_refusal(errors, path, spec, words, as_data=in_input) from None
            raise validation_errors(errors, path, spec.input_model, as_data=in_input) from None
    return input_data


_Words = Callable[[Any, str | None, bool], str]
"""Words for one schema error of a value no person typed: ``(error, file widget, as data)``."""


def _words_for(next_job: str | None, item: int | None) -> _Words | None:
    if next_job is not None:
        return lambda err, widget, as_data: next_job_words(err, next_job, widget, as_data=as_data)
    if item is not None:
        # an item is data whatever it holds (:func:`~app.jobs.fanout.substitute` wraps it as literal)
        return lambda err, widget, as_data: item_words(err, item, widget)
    return None


def _worded_refusal(
    errors: Sequence[Any],
    path: str,
    spec: Any,
    words: _Words,
    as_data: Callable[[Sequence[int | str]], bool] | None = None,
) -> BadInput:
    def worded(err: Any, widget: str | None) -> str:
        return words(err, widget, as_data is not None and as_data(err["loc"]))

    return errors_in_words(errors, path, spec.input_model, worded)


def check_step_submission(
    step: dict[str, Any], stored: dict[str, Any], path: str, settings: Settings
) -> None:
    """The checks of a step's type at submission (:meth:`~app.jobs.types.ProcessorSpec.check_submission`)
    on ``stored`` (its input as :func:`validate_step_input` returned it), as the step will run: data
    wrapped as literal unwrapped, and with parents when it depends on other steps. The queue runs them
    again as it inserts the step; here they refuse a template's schedule when it is made, not when it fires.

    Raises:
        BadInput: naming the field under ``path`` (``steps[2].input_data.images``).
    """
    type_ = step.get("type")
    spec = registry.get(type_) if isinstance(type_, str) else None
    if spec is None:
        return
    data = unwrap_literals(stored) if has_literals(stored) else stored
    spec.check_submission(data, settings, has_parents=bool(step.get("depends_on")), field_prefix=path)


def check_ref_sources(step: dict[str, Any], path: str) -> None:
    """Each ``{"$ref": …}`` in a step's input names one of the steps it depends on: a step runs with its
    parents' results only (:func:`resolve_refs`), so a ``$ref`` to an unknown step, to one it does not
    wait for, or one that is not text could only fail when the step runs, after the steps before it.
    ``path`` is the step's input (``steps[1].input_data``); a step run once per item may name the step
    whose instances it depends on (``thumb`` for ``thumb[0]``).

    Raises:
        BadInput: naming the field that holds the ``$ref`` (``steps[1].input_data.url``).
    """
    deps = [d for d in step.get("depends_on") or [] if isinstance(d, str)]
    sources = set(deps) | {b for d in deps if (b := base_key(d)) is not None}

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            if is_literal(value):
                return
            if set(value) == {"$ref"}:
                ref = value["$ref"]
                if (problem := ref_problem(ref)) is not None:
                    raise BadInput.field(where, problem)
                key = ref.split(".", 1)[0]
                if key not in sources:
                    raise BadInput.field(
                        where,
                        f"{ref[:100]!r} reads step {key[:64]!r}, which this step does not depend on; a step "
                        "reads only the results of the steps in its depends_on",
                    )
                return
            for k, v in value.items():
                walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")

    walk(step.get("input_data") or {}, path)


def rename_refs(input_data: Any, renames: Mapping[str, str]) -> Any:
    """``input_data`` with each ``{"$ref": "key.field"}`` whose step ``key`` is in ``renames`` reading
    ``renames[key]`` instead (a processor's next job stored under another key than it asked for, its own
    being taken in the pipeline already)."""
    if not renames:
        return input_data
    if isinstance(input_data, dict):
        ref = input_data.get("$ref")
        if set(input_data) == {"$ref"} and isinstance(ref, str):
            key, dot, rest = ref.partition(".")
            return {"$ref": renames[key] + dot + rest} if key in renames else input_data
        if is_literal(input_data):
            return input_data
        return {k: rename_refs(v, renames) for k, v in input_data.items()}
    if isinstance(input_data, list):
        return [rename_refs(v, renames) for v in input_data]
    return input_data


def resolve_refs(input_data: Any, parents: dict[str, Any]) -> Any:
    """Replace each ``{"$ref": "key.field.sub"}`` with that value of parent ``key``'s result_data, and
    each ``{"$literal": v}`` with ``v``, in one pass over what the person wrote: a value put in (a
    parent's result, an item, a literal) is data, never looked into for more references.

    Raises:
        PermanentError: the parent or field does not exist (retrying cannot fix it).
    """
    if isinstance(input_data, dict):
        if set(input_data) == {"$ref"} and isinstance(input_data["$ref"], str):
            return _resolve_ref(input_data["$ref"], parents)
        if is_literal(input_data):
            return input_data[LITERAL]
        return {k: resolve_refs(v, parents) for k, v in input_data.items()}
    if isinstance(input_data, list):
        return [resolve_refs(v, parents) for v in input_data]
    return input_data


def refs_by_field(input_data: Any) -> dict[str, str]:
    """Each ``{"$ref": …}`` of a step's input as written, by the field it fills (named as
    :func:`~app.jobs.input_words.field_named` names an error's place: ``name``, ``extra.a``, ``xs[1]``)."""
    found: dict[str, str] = {}

    def walk(value: Any, loc: tuple[int | str, ...]) -> None:
        if isinstance(value, dict):
            if set(value) == {"$ref"} and isinstance(value["$ref"], str):
                found[field_named(loc)] = value["$ref"]
            elif not is_literal(value):
                for k, v in value.items():
                    walk(v, (*loc, k))
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, (*loc, i))

    walk(input_data, ())
    return found


def input_unfit_words(details: Sequence[Any], input_data: Any, spec: Any) -> str:
    """What is wrong with a job's input as it runs (its ``$ref`` values read, ``details``: the schema's
    errors), sentence by sentence: "The value $ref 'a.v' gave for 'name' is an object; it must be text."
    Said for what an earlier step's result gave, or the stored input, never as a form's "Enter text":
    the job's owner typed neither."""
    refs = refs_by_field(input_data)
    bad = errors_in_words(details, "input_data", spec.input_model, lambda e, w: run_time_words(e, refs, w))
    return " ".join(bad.errors.values())


def _resolve_ref(ref: str, parents: dict[str, Any]) -> Any:
    key, *fields = ref.split(".")
    if key not in parents:
        instances = group_instances(parents).get(key)
        if instances is None:
            raise PermanentError(f"input refers to step {key!r}, which is not an upstream step of this one")
        # A step run once per item: the field of every instance's result, in item order.
        return [_field(ref, key, result, fields) for result in instances]
    return _field(ref, key, parents[key], fields)


def _field(ref: str, key: str, value: Any, fields: list[str]) -> Any:
    for f in fields:
        if isinstance(value, dict) and f in value:
            value = value[f]
        elif isinstance(value, list) and (index := whole(f)) is not None and index < len(value):
            value = value[index]
        else:
            raise PermanentError(f"input refers to {ref!r}, but step {key!r} has no such result")
    return value


# --- next jobs from processors ----------------------------------------------------------------------


def check_next_job_parents(i: int, type_: Any, key: Any, input_data: Any, *, has_parents: bool) -> None:
    """A processor's next job ``i`` with a field left empty for the steps before it to fill (a contact
    sheet's pictures) and no step before it: the type's own rule at submission
    (:meth:`~app.jobs.types.ProcessorSpec.parents_only`, the one the queue applies on every path), in
    this path's words. The form's ("choose at least one picture…") told the job's owner to do what only
    the processor's code can: the refusal says which next job, which field, and what the processor left
    out.

    Raises:
        BadInput: naming ``next_jobs[i].input_data.<field>`` for each such field.
    """
    spec = registry.get(type_) if isinstance(type_, str) else None
    if spec is None or has_parents:
        return
    needed = spec.parents_only(unwrap_literals(input_data) if has_literals(input_data) else input_data)
    if not needed:
        return
    which = next_job_label(i, type_, key)
    words = next_job_parents_words(list(needed.values()))
    errors = {f"next_jobs[{i}].input_data.{name}": words for name in needed}
    raise BadInput(f"{which}: {words}", errors=errors)


def check_next_job_submission(
    i: int, type_: Any, key: Any, input_data: Any, settings: Settings, *, has_parents: bool
) -> None:
    """The checks of a processor's next job ``i``'s type at submission
    (:meth:`~app.jobs.types.ProcessorSpec.check_submission`: its own address for ``http.request``, …),
    the rule the queue applies again as it inserts the job, in this path's words: which next job, which
    field, what it was given and why it cannot be used. The queue's own refusal said only the form's
    words, with nothing to tell which of the processor's next jobs they were about. A field that only
    the steps before it could fill is :func:`check_next_job_parents`'s, checked first.

    Raises:
        BadInput: naming ``next_jobs[i].input_data.<field>`` for each field refused.
    """
    check_next_job_parents(i, type_, key, input_data, has_parents=has_parents)
    spec = registry.get(type_) if isinstance(type_, str) else None
    if spec is None or not isinstance(input_data, dict):
        return
    data = unwrap_literals(input_data) if has_literals(input_data) else input_data
    try:
        spec.check_submission(data, settings, has_parents=has_parents, field_prefix="input_data")
    except BadInput as exc:
        label = next_job_label(i, type_, key)
        fields = {name.removeprefix("input_data."): text for name, text in exc.errors.items()}
        errors = {
            f"next_jobs[{i}].input_data.{name}": next_job_check_words(label, name, data.get(name), text)
            for name, text in fields.items()
        }
        raise BadInput(next(iter(errors.values())), errors=errors) from None


def plan_next_jobs(creator: Any, next_jobs: Sequence[NextJob], settings: Settings) -> list[NextJob]:
    """Check the jobs a processor returned before its completion is recorded: types and inputs valid,
    keys unique, dependencies among them acyclic. Returns them unchanged.

    Raises:
        BadInput: the processor asked for something invalid (its job then fails permanently).
    """
    for i, nj in enumerate(next_jobs):
        if not isinstance(nj, NextJob):
            raise BadInput.field(f"next_jobs[{i}]", "must be a NextJob")
        label = next_job_label(i, nj.type, nj.key)
        validate_step_input(nj.type, nj.input_data, f"next_jobs[{i}].input_data", settings, next_job=label)
        check_next_job_submission(
            i, nj.type, nj.key, nj.input_data, settings, has_parents=bool(nj.depends_on)
        )
    new_keys = {nj.key or f"next-{i + 1}" for i, nj in enumerate(next_jobs)}
    specs = [
        {
            "key": nj.key or f"next-{i + 1}",
            "depends_on": [str(d) for d in nj.depends_on if str(d) in new_keys],
        }
        for i, nj in enumerate(next_jobs)
    ]
    check_graph(specs, "next_jobs")  # only edges among the new jobs can form a cycle
    return list(next_jobs)
