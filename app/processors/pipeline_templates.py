"""The built-in pipeline templates: "Photo batch" and "CSV report with review".

Kept apart from the processor modules because those are imported anew by every CPU-bound job's process,
and :mod:`app.pipelines` (SQLAlchemy and the queue) would make each of them half a second slower.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from app.pipelines import Template, TemplateStep, template
from app.processors import TABLES, FileId, Input
from app.processors.images import PhotoBatchInput
from app.processors.reports import DELIMITER_LABELS, ENCODING_LABELS, Delimiter, Encoding

# --- Photo batch ------------------------------------------------------------------------------------


def _thumb_step(values: dict[str, Any]) -> dict[str, Any]:
    return {"image": {"$item": ""}, "sizes": values["sizes"], "format": values["format"]}


def _sheet_step(values: dict[str, Any]) -> dict[str, Any]:
    return {"columns": values["columns"], "title": values["title"] or f"{len(values['images'])} pictures"}


PHOTO_BATCH = template(
    Template(
        name="photo_batch",
        title="Photo batch",
        description="Upload several pictures: each gets thumbnails in parallel, then one contact sheet "
        "and a zip of all thumbnails.",
        input_model=PhotoBatchInput,
        group="Pictures",
        steps_note="one step per picture, then a contact sheet",
        steps=(
            TemplateStep(
                "thumb",
                "images.thumbnail",
                _thumb_step,
                title="Thumbnails",
                for_each=lambda values: list(values["images"]),
            ),
            TemplateStep(
                "sheet",
                "images.contact_sheet",
                _sheet_step,
                ("thumb",),
                title="Contact sheet and zip of all thumbnails",
            ),
        ),
    )
)
"""``thumb`` runs once per picture (steps ``thumb[0]``, ``thumb[1]``…, in parallel, ``for_each`` over
the uploaded pictures); ``sheet`` waits for all of them and lays out their thumbnails."""


# --- CSV report with review -------------------------------------------------------------------------


class CsvReviewInput(Input):
    """Input of the "CSV report with review" pipeline."""

    file: FileId = Field(
        title="CSV file",
        description="A .csv file, for example exported from a spreadsheet.",
        json_schema_extra=TABLES,
    )
    encoding: Encoding = Field(
        "auto",
        title="Text encoding",
        description="Leave on auto unless letters come out wrong.",
        json_schema_extra=ENCODING_LABELS,
    )
    delimiter: Delimiter = Field("auto", title="Separator", json_schema_extra=DELIMITER_LABELS)
    title: str = Field("", max_length=150, title="Report title")
    top: int = Field(5, ge=1, le=20, title="Most common values shown")


def _check_step(v: dict[str, Any]) -> dict[str, Any]:
    return {"file": v["file"], "encoding": v["encoding"], "delimiter": v["delimiter"]}


def _summary_step(v: dict[str, Any]) -> dict[str, Any]:
    return {
        "file": v["file"],
        "encoding": {"$ref": "check.encoding"},
        "delimiter": {"$ref": "check.delimiter"},
        "header": {"$ref": "check.header"},
        "title": v["title"],
        "top": v["top"],
        "build_report": False,
    }


CSV_REVIEW = template(
    Template(
        name="csv_report_review",
        title="CSV report with review",
        description="Checks a CSV file's columns; once an admin approves them, summarises the file and "
        "builds the HTML report.",
        input_model=CsvReviewInput,
        group="Reports",
        steps=(
            TemplateStep(
                "check",
                "report.csv_check",
                _check_step,
                requires_approval=True,
                title="Check the columns",
            ),
            TemplateStep(
                "summary", "report.csv_summary", _summary_step, ("check",), title="Summarise every column"
            ),
            TemplateStep(
                "report",
                "report.csv_report",
                {"from_step": "summary"},
                ("summary",),
                title="Build the report",
            ),
        ),
    )
)
"""``check`` runs and waits for an admin's approval (its result lists the columns found); then
``summary`` reads the file the way the check found it (``$ref`` to the check's result) and ``report``
turns the summary into the HTML report. A rejection cancels ``summary`` and ``report``."""
