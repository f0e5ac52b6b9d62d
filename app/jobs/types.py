"""Job types as the queue sees them: the registry of processors, input schemas and their checks.

The queue validates every job's input against its type's schema when the job is enqueued, so the
registry lives here, below the queue; :mod:`app.processors` (the processor API, above the queue) fills
it and re-exports everything here, so processor modules keep importing from ``app.processors``.

The registry imports the modules that register job types on first use, by module name: the list is
``PROCESSOR_MODULES`` of :data:`PROCESSOR_PACKAGE`, plus ``JOBDESK_PROCESSOR_MODULES``.

CPU-bound processors import this module in their own processes: keep its imports light (pydantic, no
SQLAlchemy).
"""

from __future__ import annotations

import functools
import importlib
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    PydanticUserError,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails

from app.errors import BadInput
from app.jobs.backoff import RetryPolicy
from app.jobs.file_inputs import file_fields, item_nouns
from app.jobs.input_words import problem_words

PROCESSOR_PACKAGE = "app.processors"
"""The package whose ``PROCESSOR_MODULES`` names the modules that register job types (imported by name
on first use of the registry, so that this module never imports the processors above it)."""


# --- input schemas ------------------------------------------------------------------------------


class Input(BaseModel):
    """Base class of every processor's input schema; unknown fields are refused (a typo is an error).

    Field ``title``/``description``/default drive the generated web form. Annotated types in
    :mod:`app.processors` (``LongText``, ``FileId``, ``FileIds``) add form widgets a plain type cannot
    express.
    """

    # Each schema's validator is built at its first use rather than when its processor module is imported:
    # a worker loads every processor module as it starts, and building all the schemas then cost 15-30 ms
    # of its launch to first claim, for job types it may not see for hours.
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False, defer_build=True)

    @model_validator(mode="wrap")
    @classmethod
    def _no_flag_for_a_number(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """Refuse ``true``/``false`` and text where a number belongs. pydantic reads a flag as 1 or 0, so
        ``{"quality": true}`` made a thumbnail of JPEG quality 1 and ``{"sizes": [true]}`` was refused as
        "got 1": no one writes a yes/no to mean a number. And in its lax mode it reads text as a number
        (``"85"``, and ``"1_0"`` or a full-width ``"１０"`` as 10), which the README never promised: a
        JSON number is how the API takes one, as its own fields refuse ``"5"``. (A form's field and a
        spreadsheet's cell are text by nature, and are read as numbers by :mod:`app.digits`' rule before
        they get here; a ``Decimal`` field, whose schema takes text, keeps taking it.) Checked here, in
        every input schema and before its own checks, so every path that validates an input refuses it
        the same way (the API, batches, pipelines, schedules, next jobs, a value a ``$ref`` read),
        naming the field as a number's error does."""
        if isinstance(data, dict):
            schema = _schema_of(cls)
            found = list(_flags_for_numbers(data, schema, schema.get("$defs", {}), ()))
            if found:
                raise ValidationError.from_exception_data(cls.__name__, found)
        return handler(data)


@functools.cache
def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    try:
        return model.model_json_schema()
    except PydanticUserError:  # a processor's type with no JSON schema: pydantic's checks alone
        return {}


def _number_kind(node: Any, defs: dict[str, Any], taken: str = "boolean") -> str | None:
    """``int_type`` or ``float_type`` when the schema ``node`` takes a number and not the JSON kind
    ``taken`` (``boolean`` for a flag, ``string`` for text)."""
    kinds: set[str] = set()

    def collect(n: Any) -> None:
        if not isinstance(n, dict):
            return
        if isinstance(n.get("$ref"), str):
            collect(defs.get(n["$ref"].rsplit("/", 1)[-1]))
        t = n.get("type")
        kinds.update([t] if isinstance(t, str) else t if isinstance(t, list) else [])
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in n.get(key) or []:
                collect(sub)
        if not n.get("type") and not any(k in n for k in ("$ref", "anyOf", "oneOf", "allOf")):
            kinds.add("any")

    collect(node)
    if kinds & {taken, "any"}:
        return None
    if "number" in kinds:
        return "float_type"
    return "int_type" if "integer" in kinds else None


def _resolved(node: Any, defs: dict[str, Any]) -> Any:
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        node = defs.get(node["$ref"].rsplit("/", 1)[-1])
    return node


def _flags_for_numbers(raw: Any, node: Any, defs: dict[str, Any], loc: tuple[str | int, ...]) -> Any:
    """An ``int_type``/``float_type`` error for each ``bool`` or ``str`` in ``raw`` where the schema
    ``node`` takes a number (and not that kind): into objects' properties (and their other keys' schema) and arrays' items, through the one
    branch of an ``anyOf`` that takes ``raw``'s kind (``list[int] | None``)."""
    node = _resolved(node, defs)
    if not isinstance(node, dict):
        return
    if isinstance(raw, bool | str):
        kind = _number_kind(node, defs, "boolean" if isinstance(raw, bool) else "string")
        if kind is not None:
            yield InitErrorDetails(type=kind, loc=loc, input=raw)
        return
    wanted = "object" if isinstance(raw, dict) else "array" if isinstance(raw, list) else None
    for key in ("anyOf", "oneOf", "allOf"):
        subs = [_resolved(sub, defs) for sub in node.get(key) or []]
        fits = [sub for sub in subs if isinstance(sub, dict) and wanted and sub.get("type") == wanted]
        for sub in subs if key == "allOf" else fits if len(fits) == 1 else []:
            yield from _flags_for_numbers(raw, sub, defs, loc)
    if isinstance(raw, dict):
        props: dict[str, Any] = node["properties"] if isinstance(node.get("properties"), dict) else {}
        others = node.get("additionalProperties")
        for name, value in raw.items():
            sub = props.get(name, others if isinstance(others, dict) else None)
            yield from _flags_for_numbers(value, sub, defs, (*loc, name))
    elif isinstance(raw, list) and isinstance(node.get("items"), dict):
        for i, value in enumerate(raw):
            yield from _flags_for_numbers(value, node["items"], defs, (*loc, i))


class EmptyInput(Input):
    """For job types that take no input."""


InputModel = type[Input]
"""A processor's or template's input schema (a subclass of :class:`Input`)."""


def validation_error(exc: ValidationError, prefix: str, model: InputModel | None = None) -> BadInput:
    """A pydantic ``ValidationError`` as :class:`BadInput` with dotted field paths under ``prefix``; with
    the ``model`` checked, a file field's problem says what a file field takes."""
    return validation_errors(exc.errors(), prefix, model)


def validation_errors(
    details: Sequence[ErrorDetails],
    prefix: str,
    model: InputModel | None = None,
    *,
    as_data: Callable[[Sequence[int | str]], bool] | None = None,
) -> BadInput:
    """Some of a ``ValidationError``'s errors (at least one) as :class:`BadInput`, as
    :func:`validation_error` does for all of them. Each problem is said as the forms say it
    (:func:`app.jobs.input_words.problem_words`); a field that is missing or not the type's stays a
    short phrase after its path ("input_data.url: is required"). ``as_data(loc)`` says whether the value
    at an error's location was written as data (inside a pipeline step's ``{"$literal": …}``)."""
    files = file_fields(model) if model is not None else {}
    nouns = item_nouns(model) if model is not None else {}
    errors: dict[str, str] = {}
    for err in details:
        path = _error_path(prefix, err["loc"])
        if err["type"] == "extra_forbidden":
            message = "is not a field of this job type"
        elif err["type"] == "missing":
            message = "is required"
        else:
            top = err["loc"][0] if err["loc"] else None
            # without its full stop: it follows a path, and paths are joined ("…; input_data.b: …")
            data = as_data is not None and as_data(err["loc"])
            widget = files.get(top) if isinstance(top, str) else None
            noun = nouns.get(top, "item") if isinstance(top, str) and len(err["loc"]) == 1 else "item"
            message = problem_words(err, widget, as_data=data, noun=noun).removesuffix(".")
        errors.setdefault(path, message)
    first_path, first_msg = next(iter(errors.items()))
    return BadInput(f"{first_path}: {first_msg}", errors=errors)


def _error_path(prefix: str, loc: Sequence[int | str]) -> str:
    path = prefix
    for part in loc:
        path = f"{path}[{part}]" if isinstance(part, int) else f"{path}.{part}"
    return path


def errors_in_words(
    details: Sequence[ErrorDetails],
    prefix: str,
    model: InputModel | None,
    words: Callable[[ErrorDetails, str | None], str],
) -> BadInput:
    """Some of a ``ValidationError``'s errors (at least one) as :class:`BadInput` for a path whose values
    no person typed (a processor's next job, an input as it runs): each a whole sentence from ``words(error,
    file widget of its field or None)`` (:mod:`app.jobs.input_words` words each path), keyed by its
    field's path under ``prefix``; the message is the first's."""
    files = file_fields(model) if model is not None else {}
    errors: dict[str, str] = {}
    for err in details:
        top = err["loc"][0] if err["loc"] else None
        widget = files.get(top) if isinstance(top, str) else None
        errors.setdefault(_error_path(prefix, err["loc"]), words(err, widget))
    return BadInput(next(iter(errors.values())), errors=errors)


# --- what a processor may return or raise -------------------------------------------------------


@dataclass
class NextJob:
    """A job a processor asks to create when it completes.

    It joins the pipeline of the creating job (one is created if there is none) and belongs to the
    creating job's owner, so a processor cannot create jobs for someone else. ``depends_on`` holds
    ``key`` values of other next jobs from the same result and/or ids of jobs already in the pipeline;
    the graph is checked for cycles before the completion is recorded.
    """

    type: str
    input_data: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    depends_on: list[str | uuid.UUID] = field(default_factory=list)
    requires_approval: bool = False
    title: str | None = None
    priority: int = 0


class PermanentError(Exception):
    """Fail the job now, without retries: the input is wrong, or a service said no (4xx)."""


# --- registry -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessorSpec:
    """A registered job type. ``timeout`` is seconds per attempt (``None``: ``JOB_DEFAULT_TIMEOUT_SECS``);
    ``max_attempts``/``retry`` override the global retry settings; ``diagnostic`` types are shown only to
    admins; ``group`` groups the catalogue; ``next_types`` are the admins-only types this type's
    processor creates as next jobs (see :func:`may_create_next`)."""

    type: str
    title: str
    description: str
    input_model: InputModel
    func: Callable[..., Any]
    cpu_bound: bool = False
    timeout: float | None = None
    max_attempts: int | None = None
    retry: RetryPolicy | None = None
    diagnostic: bool = False
    group: str = "General"
    next_types: tuple[str, ...] = ()
    settings_check: Callable[[dict[str, Any], Any], dict[str, str]] | None = None
    """Checks of an input that need the settings (e.g. Jobdesk's own address): given the input and the
    settings, the problems by field name. Run by the queue at every submission (:meth:`check_submission`),
    whatever path the job came by, on a pipeline step's values as it will run with them (``{"$literal":
    v}`` as ``v``); values still to be resolved (``$ref``) are the processor's to check when it runs."""
    submit_check: Callable[[dict[str, Any], bool], dict[str, str]] | None = None
    """Checks of an input that tell at submission that the job could only fail: given the input (as
    :attr:`settings_check` gets it) and whether the job will have parents whose results it reads (a
    pipeline step or a next job with dependencies), the problems by field name, worded for the person
    who filled in the form. For an input valid only in a pipeline (a field left empty for the parents
    to fill): the schema alone cannot know whether the job has parents, and without this the person
    learns it only when the job fails. Run with :attr:`settings_check` (:meth:`check_submission`)."""

    def check_submission(
        self, data: Any, settings: Any, *, has_parents: bool, field_prefix: str = "input_data"
    ) -> None:
        """Run :attr:`settings_check` and :attr:`submit_check` on ``data`` (a job with ``has_parents``).

        Raises:
            BadInput: one entry per field they refuse, keyed ``input_data.<field>``.
        """
        if not isinstance(data, dict):
            return
        problems: dict[str, str] = {}
        if self.settings_check is not None:
            problems.update(self.settings_check(data, settings))
        if self.submit_check is not None:
            for name, text in self.submit_check(data, has_parents).items():
                problems.setdefault(name, text)
        if problems:
            errors = {f"{field_prefix}.{name}": text for name, text in problems.items()}
            # the detail names its field as the schema's refusals do (``input_data.url: …``): the API's
            # detail is the one line a client may show, and alone it said nothing of where the problem was
            first = next(iter(errors))
            raise BadInput(f"{first}: {errors[first]}", errors=errors)

    def parents_supply(self, data: Any) -> list[str]:
        """The titles of the fields of ``data`` that :attr:`submit_check` accepts only for a job with
        parents: what, for this input, only the steps before it could give it. The same rule as
        :meth:`check_submission`'s, for a path that words its refusal itself: a step's "run again" is a
        job on its own that nobody filled in, so "choose …", written for a form, would not fit it."""
        return list(self.parents_only(data).values())

    def parents_only(self, data: Any) -> dict[str, str]:
        """:meth:`parents_supply` as ``{field name: its title}``, for a path that names the field too (a
        processor's next job: ``next_jobs[0].input_data.images``)."""
        if self.submit_check is None or not isinstance(data, dict):
            return {}
        with_parents = self.submit_check(data, True)
        fields = self.input_model.model_fields
        return {
            name: str(fields[name].title if name in fields and fields[name].title else name)
            for name in self.submit_check(data, False)
            if name not in with_parents
        }

    def validate_input(self, data: dict[str, Any], *, field_prefix: str = "input_data") -> dict[str, Any]:
        """Validate ``data`` against the input schema; return it normalised (defaults filled, JSON types).

        Raises:
            BadInput: one entry per bad field, keyed ``input_data.<field path>``.
        """
        try:
            model = self.input_model.model_validate(data)
        except ValidationError as exc:
            raise validation_error(exc, field_prefix, self.input_model) from None
        return model.model_dump(mode="json")

    def parse_input(self, data: dict[str, Any]) -> Input:
        return self.input_model.model_validate(data)


class Registry:
    """Job types by name. The modules that register them are imported on first use."""

    def __init__(self, package: str = PROCESSOR_PACKAGE) -> None:
        self._package = package
        self._specs: dict[str, ProcessorSpec] = {}
        self._loaded = False
        self._lock = threading.Lock()

    def register(self, spec: ProcessorSpec) -> None:
        existing = self._specs.get(spec.type)
        if existing is not None and existing.func is not spec.func:
            raise ValueError(f"job type {spec.type!r} is registered twice")
        self._specs[spec.type] = spec

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if not self._loaded:
                package = importlib.import_module(self._package)
                for module in [*getattr(package, "PROCESSOR_MODULES", []), *_extra_modules()]:
                    importlib.import_module(module)
                self._loaded = True

    def get(self, type_: str) -> ProcessorSpec | None:
        self._load()
        return self._specs.get(type_)

    def names(self) -> list[str]:
        self._load()
        return list(self._specs)

    def all(self) -> list[ProcessorSpec]:
        self._load()
        return list(self._specs.values())


# --- who may start which type ---------------------------------------------------------------------
# The rules below are pure functions of the person's admin flag and the specs, so every path that
# creates jobs applies the same ones: app.actions.access for people (form, API, pipelines, schedules),
# the queue for a processor's next jobs, the schedule sweep for a schedule's owner at firing time.

INTERNAL_GROUP = "Pipeline steps"
"""The catalogue group that marks a type as a step of a built-in pipeline."""


def is_internal(spec: ProcessorSpec) -> bool:
    """A step of a built-in pipeline, not a job on its own."""
    return spec.group == INTERNAL_GROUP


def admins_only(spec: ProcessorSpec) -> bool:
    """Diagnostic and internal types may be submitted directly by admins only."""
    return spec.diagnostic or is_internal(spec)


def may_submit(is_admin: bool, spec: ProcessorSpec) -> bool:
    """Whether a person (``is_admin``) may submit a job of this type directly."""
    return is_admin or not admins_only(spec)


TYPE_SHOWN_MAX = 100
"""The most characters of a job type's name an answer, a page or an audit entry echoes."""


def cut_type(name: Any) -> str:
    """A type name as sent, cut at :data:`TYPE_SHOWN_MAX` characters with "…" (a registered name is far
    shorter): what an unknown type's refusal and its audit entry echo of it, never a whole path
    segment or field of thousands of characters, nor a cut that reads as the whole name."""
    text = str(name)
    return text if len(text) <= TYPE_SHOWN_MAX else text[:TYPE_SHOWN_MAX] + "…"


def type_shown(name: Any) -> str:
    """:func:`cut_type`, quoted, for a sentence naming an unknown type."""
    return repr(cut_type(name))


def refusal(spec: ProcessorSpec) -> str:
    """Why a non-admin may not submit ``spec`` directly, in plain words."""
    if is_internal(spec):
        return f"only admins may start {spec.type!r} on its own: it is a step of a built-in pipeline"
    return f"only admins may start {spec.type!r}: it is for testing and diagnostics"


def owner_refusal(owner_is_admin: bool, spec: ProcessorSpec, *, coded: bool = False) -> str | None:
    """Why work of type ``spec`` may not be put in the queue for its owner *now* (as they are at this
    moment: an admin demoted since keeps no admin rights over their old jobs), in plain words, or ``None``.
    The one rule behind every path that makes or requeues a job of an existing one — retry (one job, many
    by a filter, a batch's failed rows), run again, a step's rerun — and a schedule's firing: the owner
    must be allowed to submit the type (:func:`may_submit`). ``coded``: the job is a step its pipeline's
    template wrote, or a next job a processor made; its type was chosen by code, so an internal step
    (:func:`is_internal`) stays allowed in place, as it was when it was made. A diagnostic type never is:
    it was admitted for an admin only."""
    if may_submit(owner_is_admin, spec) or (coded and is_internal(spec)):
        return None
    return refusal(spec)


PRIORITY_RANGE = (-100, 100)
"""Accepted ``priority`` of a job (enqueue's range check, :mod:`app.jobs.queue.new_jobs`); higher runs first."""
USER_MAX_PRIORITY = 0
"""The highest ``priority`` a person who is not an admin may give a job. Claims are strictly by priority
with no aging, so a higher one would run ahead of everyone else's jobs for as long as it keeps some
due; a person may still lower their own jobs (down to the queue's range), and admins use the range."""


def priority_refusal(is_admin: bool, priority: Any) -> str | None:
    """Why a person (``is_admin``) may not give a job ``priority``, in plain words, or ``None``. A value
    that is not a whole number from :data:`PRIORITY_RANGE` is left to the queue's range check, which
    names it: that is the first thing wrong with it, whoever sends it (``10**30`` is not a priority at
    all, and "use 0 or lower" would not be the fix)."""
    if (
        is_admin
        or isinstance(priority, bool)
        or not isinstance(priority, int)
        or not USER_MAX_PRIORITY < priority <= PRIORITY_RANGE[1]
    ):
        return None
    return (
        f"only admins may give a job a priority above {USER_MAX_PRIORITY}: jobs are claimed strictly by "
        f"priority, so it would run ahead of everyone else's; use {USER_MAX_PRIORITY} or lower"
    )


def priority_lowered(before: Any, after: Any) -> str | None:
    """What to tell the person when a new job made from another ("Run again") got a lower priority than
    the job it repeats (its owner is not an admin, and the old job had one above
    :data:`USER_MAX_PRIORITY`), or ``None`` when it kept it."""
    if before is None or after is None or int(after) >= int(before):
        return None
    return (
        f"Its priority was lowered from {before} to {after}: a priority above {USER_MAX_PRIORITY} is for "
        "admins, and the job's owner is not one."
    )


def may_create_next(owner_is_admin: bool, creator: ProcessorSpec | None, spec: ProcessorSpec) -> bool:
    """Whether a job of type ``creator``, owned by someone who is (not) an admin, may create a next job
    of type ``spec`` (the next job belongs to the same owner).

    A type the owner may submit is always allowed. Otherwise: an internal step only when the creator
    declares it in ``next_types`` or is a step of the same group (a built-in pipeline's planning step
    creating its own steps); a diagnostic type only when the creator is admins-only itself (it was
    admitted already, so its follow-ups are too). What a public type's processor cannot do is turn a
    non-admin's job into a diagnostic one or into another pipeline's internal step.
    """
    if may_submit(owner_is_admin, spec):
        return True
    if creator is None:
        return False
    if spec.type in creator.next_types:
        return True
    if is_internal(spec):
        return creator.group == spec.group
    return admins_only(creator)


def _extra_modules() -> list[str]:
    """``JOBDESK_PROCESSOR_MODULES``: modules with your own job types, loaded without editing Jobdesk."""
    return [m.strip() for m in os.environ.get("JOBDESK_PROCESSOR_MODULES", "").split(",") if m.strip()]


registry = Registry()
