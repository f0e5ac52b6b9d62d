"""Which job types and pipeline templates a person may start.

A job type is marked in its ``@processor`` registration:

* ``diagnostic=True`` — for testing and diagnostics (``noop``, ``sleep``, ``fail``, ``cpu``);
* ``group="Pipeline steps"`` (also ``diagnostic=True``) — an *internal* type: a step that only makes
  sense inside a built-in pipeline (``images.batch``, ``report.csv_report``).

Both are for admins only when submitted directly: through the form, ``POST /api/jobs``, a step of an
ad-hoc pipeline, a schedule, or "run again". Internal types stay usable as steps of the registered
templates (their steps are code, not input) and as next jobs of a step of the same pipeline group
(or of a type that declares them in ``next_types``).

A job's ``priority`` above 0 is for admins too (:func:`check_priority`): claims are strictly by priority.

The rules are pure functions in :mod:`app.jobs.types`; this module applies them to a person for every
path that starts work (form, API, ad-hoc pipelines, templates, schedules), and the layers below the
actions use the same functions directly: the queue for a processor's next jobs, the schedule sweep for
a schedule's owner at each firing. So no entry point re-implements them.
"""

from __future__ import annotations

from typing import Any, Protocol

from app.errors import BadInput, NotFound
from app.jobs import types
from app.jobs.types import INTERNAL_GROUP, admins_only, is_internal, priority_refusal, refusal, type_shown
from app.processors import ProcessorSpec, registry

__all__ = [
    "INTERNAL_GROUP",
    "admins_only",
    "check_priority",
    "check_template",
    "check_type",
    "is_internal",
    "may_create_next",
    "may_start_template",
    "may_submit",
    "page_spec",
    "refusal",
    "submittable_types",
]


class Person(Protocol):
    """Anyone acting: a signed-in user, an API token's owner, a schedule's owner."""

    id: int
    is_admin: bool


class HasDiagnostic(Protocol):
    """A pipeline template (only its ``name`` and ``diagnostic`` mark matter here)."""

    @property
    def name(self) -> str: ...

    @property
    def diagnostic(self) -> bool: ...


def _is_admin(person: Any) -> bool:
    return bool(getattr(person, "is_admin", False))


def may_submit(person: Any, spec: ProcessorSpec) -> bool:
    """Whether ``person`` may submit a job of this type directly (form, API, ad-hoc step, schedule)."""
    return types.may_submit(_is_admin(person), spec)


def check_type(person: Any, type_name: Any, field: str = "type") -> ProcessorSpec:
    """The registered type ``type_name`` if ``person`` may submit it.

    Raises:
        BadInput: named by ``field`` (422): a diagnostic or internal type for a non-admin; an unknown
            type, with the types this person may submit (:func:`submittable_types`; a non-admin is not
            shown the admins' ones).
    """
    spec = registry.get(type_name) if isinstance(type_name, str) else None
    if spec is None:
        known = ", ".join(sorted(s.type for s in submittable_types(person))) or "none"
        raise BadInput.field(field, f"unknown job type {type_shown(type_name)}; known types: {known}")
    if not may_submit(person, spec):
        raise BadInput.field(field, refusal(spec))
    return spec


def check_priority(person: Any, priority: Any, field: str = "priority") -> None:
    """The priority rule (:func:`app.jobs.types.priority_refusal`) for a job ``person`` asks for:
    at most :data:`~app.jobs.types.USER_MAX_PRIORITY` unless they are an admin.

    Raises:
        BadInput: a higher priority from a non-admin, named by ``field`` (422).
    """
    refused = priority_refusal(_is_admin(person), priority)
    if refused is not None:
        raise BadInput.field(field, refused)


def page_spec(person: Any, type_name: str) -> ProcessorSpec:
    """The type behind a form page. A type the person may not submit is hidden like an unknown one.

    Raises:
        NotFound: unknown, or not for this person.
    """
    spec = registry.get(type_name)
    if spec is None or not may_submit(person, spec):
        raise NotFound(f"There is no job type called {type_shown(type_name)}.")
    return spec


def submittable_types(person: Any) -> list[ProcessorSpec]:
    """The catalogue this person sees: every type they may submit directly."""
    return [spec for spec in registry.all() if may_submit(person, spec)]


def may_start_template(person: Any, template: HasDiagnostic) -> bool:
    """Templates marked ``diagnostic`` are for admins; the others for everyone, whatever their steps
    (a template's steps are code, so its internal steps are allowed)."""
    return _is_admin(person) or not template.diagnostic


def check_template(person: Any, template: HasDiagnostic, field: str = "template") -> None:
    """Raises:
    BadInput: a template marked ``diagnostic`` for a non-admin, named by ``field`` (422).
    """
    if not may_start_template(person, template):
        raise BadInput.field(
            field, f"only admins may start {template.name!r}: it is for testing and diagnostics"
        )


def may_create_next(owner: Any, creator_type: str, next_type: str) -> bool:
    """Whether a job of ``creator_type`` owned by ``owner`` may create a next job of ``next_type``: the
    rule :func:`app.jobs.types.may_create_next`, which the queue applies when it inserts next jobs."""
    spec = registry.get(next_type)
    if spec is None:
        return False
    return types.may_create_next(_is_admin(owner), registry.get(creator_type), spec)
