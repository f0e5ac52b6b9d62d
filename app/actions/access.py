"""Which job types and pipeline templates a person may start.

A job type is marked in its ``@processor`` registration:

* ``diagnostic=True`` — for testing and diagnostics (``noop``, ``sleep``, ``fail``, ``cpu``);
* ``group="Pipeline steps"`` (also ``diagnostic=True``) — an *internal* type: a step that only makes
  sense inside a built-in pipeline (``images.batch``, ``report.csv_report``).

Both are for admins only when submitted directly: through the form, ``POST /api/jobs``, a step of an
ad-hoc pipeline, a schedule, or "run again". Internal types stay usable as steps of the registered
templates (their steps are code, not input) and as next jobs that processors create. The same rules
serve every path, so no entry point re-implements them.

This module depends only on the processor registry, so lower layers (pipelines, schedules) can ask it.
"""

from __future__ import annotations

from typing import Any, Protocol

from app.errors import BadInput, NotFound
from app.processors import ProcessorSpec, registry

INTERNAL_GROUP = "Pipeline steps"
"""The catalogue group that marks a type as a step of a built-in pipeline."""


class Person(Protocol):
    """Anyone acting: a signed-in user, an API token's owner, a schedule's owner."""

    id: int
    is_admin: bool


class HasDiagnostic(Protocol):
    """A pipeline template (only its ``diagnostic`` mark matters here)."""

    @property
    def diagnostic(self) -> bool: ...


def is_internal(spec: ProcessorSpec) -> bool:
    """A step of a built-in pipeline, not a job on its own."""
    return spec.group == INTERNAL_GROUP


def admins_only(spec: ProcessorSpec) -> bool:
    """Diagnostic and internal types may be submitted directly by admins only."""
    return spec.diagnostic or is_internal(spec)


def may_submit(person: Any, spec: ProcessorSpec) -> bool:
    """Whether ``person`` may submit a job of this type directly (form, API, ad-hoc step, schedule)."""
    return bool(getattr(person, "is_admin", False)) or not admins_only(spec)


def refusal(spec: ProcessorSpec) -> str:
    """Why a non-admin may not submit ``spec`` directly, in plain words."""
    if is_internal(spec):
        return f"only admins may start {spec.type!r} on its own: it is a step of a built-in pipeline"
    return f"only admins may start {spec.type!r}: it is for testing and diagnostics"


def check_type(person: Any, type_name: Any, field: str = "type") -> ProcessorSpec | None:
    """The registered type ``type_name`` if ``person`` may submit it; ``None`` for an unknown type (the
    queue then answers with the list of known types).

    Raises:
        BadInput: a diagnostic or internal type for a non-admin, named by ``field`` (422).
    """
    spec = registry.get(type_name) if isinstance(type_name, str) else None
    if spec is not None and not may_submit(person, spec):
        raise BadInput.field(field, refusal(spec))
    return spec


def page_spec(person: Any, type_name: str) -> ProcessorSpec:
    """The type behind a form page. A type the person may not submit is hidden like an unknown one.

    Raises:
        NotFound: unknown, or not for this person.
    """
    spec = registry.get(type_name)
    if spec is None or not may_submit(person, spec):
        raise NotFound(f"There is no job type called {type_name[:100]!r}.")
    return spec


def submittable_types(person: Any) -> list[ProcessorSpec]:
    """The catalogue this person sees: every type they may submit directly."""
    return [spec for spec in registry.all() if may_submit(person, spec)]


def may_start_template(person: Any, template: HasDiagnostic) -> bool:
    """Templates marked ``diagnostic`` are for admins; the others for everyone, whatever their steps
    (a template's steps are code, so its internal steps are allowed)."""
    return bool(getattr(person, "is_admin", False)) or not template.diagnostic


def may_create_next(owner: Any, creator_type: str, next_type: str) -> bool:
    """Whether a job of ``creator_type`` owned by ``owner`` may create a next job of ``next_type``:
    internal steps always (that is what they are for); a type the owner may submit; or any type when
    the creator's own type is admins-only (it was admitted already, so its follow-ups are too). What a
    public type's processor cannot do is turn a non-admin's job into a diagnostic one."""
    spec = registry.get(next_type)
    creator = registry.get(creator_type)
    if spec is None:
        return False
    return is_internal(spec) or may_submit(owner, spec) or (creator is not None and admins_only(creator))
