"""Which fields of a job type's input hold uploaded files, read from the schema: the ``widget`` hint
that :data:`app.processors.FileId` and ``FileIds`` put there, each field's accept hint, and the file ids an
input gives (:func:`file_refs`: what the queue checks each file's owner and kind against at submission).
"""

from __future__ import annotations

import functools
import re
import uuid
from typing import Any

from pydantic import BaseModel


def widget_of(schema: Any) -> str | None:
    """The ``widget`` hint (``"textarea"``, ``"file"``, ``"files"``) of a field's JSON schema, also when it
    is nested in ``anyOf``/``oneOf``/``allOf`` (an optional ``FileId | None`` field)."""
    if isinstance(schema, dict):
        if isinstance(schema.get("widget"), str):
            return str(schema["widget"])
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in schema.get(key) or []:
                found = widget_of(sub)
                if found:
                    return found
    return None


@functools.lru_cache(maxsize=512)
def file_fields(model: type[BaseModel]) -> dict[str, str]:
    """The input fields of ``model`` that hold uploaded file ids: ``{field name: "file" | "files"}``,
    read from the ``widget`` hint that :data:`app.processors.FileId` / ``FileIds`` put in the schema."""
    schema = model.model_json_schema()
    found: dict[str, str] = {}
    for name, prop in (schema.get("properties") or {}).items():
        widget = widget_of(prop)
        if widget in ("file", "files"):
            found[name] = widget
    return found


@functools.lru_cache(maxsize=512)
def item_nouns(model: type[BaseModel]) -> dict[str, str]:
    """``{field: what one of its items is}`` for the fields of ``model`` that hold a list of uploaded
    files: the field's title in the singular when it is one plural word (the photo batch's "Pictures":
    ``picture``), else ``file``. A count of them is said in that noun ("Give at most 50 pictures."):
    "50 items" left the person to guess what was counted."""
    props = model.model_json_schema().get("properties") or {}
    titles = {
        n: str(p.get("title") or "").strip().lower() for n, p in props.items() if widget_of(p) == "files"
    }
    return {n: t[:-1] if re.fullmatch(r"[a-z]+s", t) else "file" for n, t in titles.items()}


@functools.lru_cache(maxsize=512)
def file_accepts(model: type[BaseModel]) -> dict[str, str]:
    """``{file field: its accept hint}`` of ``model`` (``image/*``, ``text/csv``: what the form's file
    input offers, and what :func:`app.file_types.kind_problem` holds a stored file to), for the fields that
    have one."""
    props = model.model_json_schema().get("properties") or {}
    return {
        name: str(props[name]["accept"])
        for name in file_fields(model)
        if isinstance(props.get(name), dict) and props[name].get("accept")
    }


def file_ids_in(model: type[BaseModel], data: dict[str, Any]) -> dict[str, list[uuid.UUID]]:
    """The file ids that ``data`` (a job's ``input_data``) gives in file fields, by field name.
    Values that are not ids (e.g. an unresolved ``{"$ref": …}``) are skipped: the schema check reports
    them."""
    out: dict[str, list[uuid.UUID]] = {}
    for name, kind in file_fields(model).items():
        value = data.get(name)
        values = value if kind == "files" and isinstance(value, list) else [value]
        ids = []
        for v in values:
            try:
                ids.append(uuid.UUID(str(v)))
            except ValueError:
                continue
        if ids:
            out[name] = ids
    return out


def file_refs(
    model: type[BaseModel], data: dict[str, Any], prefix: str = "input_data"
) -> list[tuple[str, uuid.UUID, str | None]]:
    """``[(field path, file id, accept hint)]`` for every file id in ``data``: ``input_data.image`` for a
    single-file field, ``input_data.images[2]`` for an item of a list; the hint is the field's
    (:func:`file_accepts`) or ``None``. The queue checks each file's owner and kind against them when
    the job is submitted, because CPU-bound processors only get a path and cannot check the owner
    themselves, and a CSV given as a picture would otherwise fail only once the job runs."""
    refs: list[tuple[str, uuid.UUID, str | None]] = []
    accepts = file_accepts(model)
    for name, ids in file_ids_in(model, data).items():
        accept = accepts.get(name)
        if file_fields(model)[name] == "file":
            refs.extend((f"{prefix}.{name}", i, accept) for i in ids)
        else:
            refs.extend((f"{prefix}.{name}[{n}]", i, accept) for n, i in enumerate(ids))
    return refs
