"""A test-only job type with every kind of form field, and a pipeline template, for the web UI tests
(forms are generated from the input schema, so every field kind needs a case). Imported by the UI tests; loaded into server subprocesses with
``JOBDESK_PROCESSOR_MODULES=tests.support.forms`` (the repository root on ``PYTHONPATH``), see
:data:`tests.support.webkit.FORMS_ENV`.

``test.form`` echoes its input back as a readable result, with a produced file, a link and nested data,
so the job page's result rendering is exercised too. ``test.steps`` is a pipeline template with
parallel steps: ``prepare`` → (``left`` ‖ ``right``) → ``finish``.
"""

from __future__ import annotations

import enum
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field

from app.pipelines import Template, TemplateStep, template
from app.processors import FileId, FileIds, Input, JobContext, LongText, processor


class Colour(enum.Enum):
    RED = "red"
    DARK_BLUE = "dark-blue"


class EveryFieldInput(Input):
    name: str = Field(title="Your name", description="Shown on the result.", max_length=40)
    notes: LongText = Field("", title="Notes", description="As long as you like.")
    copies: int = Field(1, ge=1, le=10, title="Copies", description="From 1 to 10.")
    scale: float = Field(1.5, gt=0, le=100, title="Scale")
    price: Decimal | None = Field(None, ge=0, title="Price")
    urgent: bool = Field(False, title="Urgent", description="Handle it first.")
    size: Literal["small", "medium", "large"] = Field("medium", title="Size")
    colour: Colour | None = Field(None, title="Colour")
    due: date | None = Field(None, title="Due date")
    remind_at: datetime | None = Field(None, title="Remind me at")
    daily_at: time | None = Field(None, title="Every day at")
    document: FileId | None = Field(None, title="Document")
    attachments: FileIds = Field(default_factory=list, title="Attachments")
    tags: list[str] = Field(default_factory=list, title="Tags", max_length=5)
    extra: dict[str, int] = Field(default_factory=dict, title="Extra settings", description="Advanced.")
    pause: float = Field(
        0.0, ge=0, le=60, title="Pause (seconds)", description="Wait this long before answering."
    )


@processor(
    "test.form",
    title="Every field",
    description="A form with one field of every kind (tests only).",
    input=EveryFieldInput,
    group="Testing",
)
async def every_field(ctx: JobContext[EveryFieldInput]) -> dict[str, Any]:
    steps = 4
    for i in range(steps):
        await ctx.report_progress(i / steps, f"Step {i + 1} of {steps}")
        await ctx.sleep(ctx.input.pause / steps)
    if ctx.input.name == "explode":
        raise RuntimeError("The name <script>alert(4)</script> is not allowed\nTraceback: line 1\nline 2")
    produced = await ctx.files.save(
        "summary.txt", f"Hello {ctx.input.name}".encode(), content_type="text/plain"
    )
    return {
        "greeting": f"Hello, {ctx.input.name}!",
        "copies": ctx.input.copies,
        "urgent": ctx.input.urgent,
        "summary": produced,
        "link": "https://example.com/report",
        "not_a_link": "javascript:alert(2)",
        "nested": {"a": [1, 2, {"b": "<b>bold</b>"}]},
        "document": str(ctx.input.document) if ctx.input.document else None,
    }


class StepInput(Input):
    seconds: float = Field(0.0, ge=0, le=60)
    label: str = ""


@processor(
    "test.step",
    title="A step",
    description="Waits, reporting progress, then finishes (tests only).",
    input=StepInput,
    group="Testing",
)
async def step(ctx: JobContext[StepInput]) -> dict[str, Any]:
    parts = 4
    for i in range(parts):
        await ctx.report_progress(i / parts, f"Part {i + 1} of {parts}")
        await ctx.sleep(ctx.input.seconds / parts)
    if ctx.input.label == "fail":
        raise RuntimeError("this step was told to fail")
    return {"label": ctx.input.label, "waited": ctx.input.seconds}


class StepsInput(Input):
    title: str = Field("Report", title="Title", max_length=60)
    seconds: float = Field(0.5, ge=0, le=60, title="Seconds per step")
    fail_right: bool = Field(False, title="Make the right step fail")


template(
    Template(
        name="test.steps",
        title="Four steps",
        description="Prepare, then two steps side by side, then finish (tests only).",
        input_model=StepsInput,
        group="Testing",
        steps=(
            TemplateStep("prepare", "test.step", lambda i: {"seconds": i["seconds"], "label": i["title"]}),
            TemplateStep(
                "left",
                "test.step",
                lambda i: {"seconds": i["seconds"], "label": "left"},
                ("prepare",),
                title="Left",
            ),
            TemplateStep(
                "right",
                "test.step",
                lambda i: {"seconds": i["seconds"], "label": "fail" if i["fail_right"] else "right"},
                ("prepare",),
                title="Right",
            ),
            TemplateStep(
                "finish", "test.step", {"seconds": 0, "label": "done"}, ("left", "right"), title="Finish"
            ),
        ),
    )
)

template(
    Template(
        name="test.approval",
        title="Needs a check",
        description="One step whose result an administrator approves, then a last step (tests only).",
        input_model=StepsInput,
        group="Testing",
        steps=(
            TemplateStep(
                "draft",
                "test.step",
                lambda i: {"seconds": 0, "label": i["title"]},
                requires_approval=True,
                title="Draft",
            ),
            TemplateStep(
                "publish", "test.step", {"seconds": 0, "label": "published"}, ("draft",), title="Publish"
            ),
        ),
    )
)
