"""An example of your own job type and pipeline template (README: "Your own processor").

Load it without editing Jobdesk, in the web process and in every worker:

    PYTHONPATH=examples JOBDESK_PROCESSOR_MODULES=my_processor make run

It adds the job type ``example.word_count`` ("Count words") and the pipeline template
``example.page_words`` ("Most common words of a web page"): the built-in ``http.request`` downloads a page,
then ``example.word_count`` counts the words of the answer's body.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pydantic import Field

from app.pipelines import Template, TemplateStep, template
from app.processors import Input, JobContext, LongText, PermanentError, processor

WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")
TAG = re.compile(r"<(script|style)\b.*?</\1\s*>|<[^>]*>", re.IGNORECASE | re.DOTALL)


# 1. The input schema: one pydantic model. Titles, descriptions and defaults become the web form;
#    LongText is a multi-line box, FileId / FileIds are file pickers. Bad input is refused with a 422
#    naming the field before any job is created.
class WordCountInput(Input):
    text: LongText = Field(title="Text", description="Plain text or a web page's HTML.", max_length=1_000_000)
    top: int = Field(10, ge=1, le=100, title="How many words to list")
    ignore: list[str] = Field(
        default_factory=lambda: ["the", "a", "an", "and", "of", "to", "in", "is", "it"],
        title="Words to leave out",
    )


# 2. The processor: an async function registered under a job type name, with a title and a one-line
#    description for people, and options (time limit per attempt, attempts, catalogue group).
#    Report progress, stop when cancelled, raise PermanentError for what retrying cannot fix; any
#    other exception is retried with backoff. Return a dict: it becomes the job's result.
@processor(
    "example.word_count",
    title="Count words",
    description="Counts the words of a text (HTML tags left out) and lists the most common ones.",
    input=WordCountInput,
    group="Examples",
    timeout=60,
    max_attempts=2,
)
async def word_count(ctx: JobContext[WordCountInput]) -> dict[str, Any]:
    """``{words, distinct, top: [{word, count}]}`` of ``ctx.input.text``.

    Raises:
        PermanentError: the text has no words.
    """
    words = WORD.findall(TAG.sub(" ", ctx.input.text).lower())
    if not words:
        raise PermanentError("The text has no words in it.")
    ignore = {w.strip().lower() for w in ctx.input.ignore}
    counts: Counter[str] = Counter()
    for i, word in enumerate(words, start=1):
        if word not in ignore:
            counts[word] += 1
        if i % 20_000 == 0:
            ctx.check_cancelled()
            await ctx.report_progress(i / len(words), f"Counted {i:,} of {len(words):,} words")
    await ctx.report_progress(1.0, f"Counted {len(words):,} words")
    return {
        "words": len(words),
        "distinct": len(counts),
        "top": [{"word": w, "count": c} for w, c in counts.most_common(ctx.input.top)],
    }


# 3. A pipeline template: its own input schema (the form), and steps that each build their input from
#    it. {"$ref": "fetch.body"} is replaced, just before the step runs, by the "body" field of the
#    "fetch" step's result.
class PageWordsInput(Input):
    url: str = Field(title="Web page address", description="An http:// or https:// address.", max_length=2048)
    top: int = Field(10, ge=1, le=100, title="How many words to list")


def _fetch(values: dict[str, Any]) -> dict[str, Any]:
    return {"method": "GET", "url": values["url"], "timeout": 20}


def _count(values: dict[str, Any]) -> dict[str, Any]:
    return {"text": {"$ref": "fetch.body"}, "top": values["top"]}


template(
    Template(
        name="example.page_words",
        title="Most common words of a web page",
        description="Downloads a web page, then counts its words.",
        input_model=PageWordsInput,
        group="Examples",
        steps=(
            TemplateStep("fetch", "http.request", _fetch, title="Download the page"),
            TemplateStep("count", "example.word_count", _count, ("fetch",), title="Count the words"),
        ),
    )
)
