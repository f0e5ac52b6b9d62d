"""A posted form's shape: every field it sends is one the form has, and each is sent once unless the form
sends it so (a many-files control). The JSON API refuses a field its route does not declare
(:mod:`app.web.body_fields`); a form read field by field with ``form.get`` dropped the others without a
word (``priority=50`` on the job form started a job at priority 0) and took the first of a repeated
field (``url`` twice), so the same input was refused by one path and half-read by the other.

Fields a browser adds of its own accord are not the form's to refuse: the CSRF token (the CSRF
middleware has already read it, :data:`BROWSER_ARTEFACTS`), and a named submit button, which a form that
has one names among its fields.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from app.web.csrf import FORM_FIELD as CSRF_FIELD
from app.web.input_guard import shown_name

BROWSER_ARTEFACTS = frozenset({CSRF_FIELD})
"""Names every form may send that carry no input of its own: the CSRF token."""


def _pairs(form: Any) -> list[tuple[str, Any]]:
    if hasattr(form, "multi_items"):
        return list(form.multi_items())
    return list(form.items())


JOB_FORM_HINT = " Use the form's own fields (the JSON API takes settings such as priority or max_attempts)."


def shape_problem(
    form: Any,
    known: Iterable[str],
    repeatable: Iterable[str] = (),
    *,
    outcome: str = "nothing was started",
    hint: str = JOB_FORM_HINT,
) -> str | None:
    """Why ``form`` cannot be read as the form whose fields are ``known`` (``repeatable``: those it may
    send more than once), in words for the top of the form; ``None`` when it can. ``outcome`` says what
    did not happen, ``hint`` (after the first sentence) what to do instead."""
    known_names = set(known) | BROWSER_ARTEFACTS
    many = set(repeatable)
    counts = Counter(name for name, _ in _pairs(form))
    unknown = [name for name in counts if name not in known_names]
    if unknown:
        names = ", ".join(repr(shown_name(n)) for n in unknown[:5])
        return f"This form has no field{'' if len(unknown) == 1 else 's'} {names}; {outcome}.{hint}"
    repeated = [name for name, n in counts.items() if n > 1 and name not in many]
    if repeated:
        names = ", ".join(repr(shown_name(n)) for n in repeated[:5])
        return (
            f"The form sent {names} more than once; send each field once. {outcome[:1].upper()}{outcome[1:]}."
        )
    return None
