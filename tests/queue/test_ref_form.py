"""A ``{"$ref": …}`` is ``"<step>.<field>"`` — a step it depends on and a non-empty field path — or the
pipeline is refused when it is made, naming where the ``$ref`` is: ``"a"``, ``"a."``, ``".x"`` and
``"a..b"`` could only fail when the step runs, after the steps before it had run. One rule for a step's
input, a ``for_each`` list, a processor's next jobs, a template's fixed input and the pipeline a
schedule starts."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app import pipelines, schedules
from app.errors import BadInput
from app.jobs.fanout import ref_problem
from app.pipelines import Template, TemplateStep
from app.settings import Settings
from tests.support.factories import TestUser

BAD = ["a", "a.", ".x", "a..b", "a.x.", "", 5, None]


def test_the_rule_in_words() -> None:
    for ref in ("a.x", "a.x.0.name", "a[0].x"):
        assert ref_problem(ref) is None, ref
    for ref in BAD:
        problem = ref_problem(ref)
        assert problem and "<step>.<field>" in problem, (ref, problem)
    assert "names no field of step 'a'" in str(ref_problem("a."))


async def make(engine: AsyncEngine, settings: Settings, owner: TestUser, step: dict[str, Any]) -> Any:
    steps = [{"key": "a", "type": "noop"}, {"key": "b", "type": "noop", "depends_on": ["a"], **step}]
    async with engine.begin() as conn:
        return await pipelines.create(conn, name="p", steps=steps, user_id=owner.id, settings=settings)


@pytest.mark.parametrize("ref", BAD)
async def test_a_ref_without_a_field_is_refused_when_the_pipeline_is_made(
    engine: AsyncEngine, settings: Settings, owner: TestUser, pg: asyncpg.Connection, ref: Any
) -> None:
    with pytest.raises(BadInput) as refused:
        await make(engine, settings, owner, {"input_data": {"seconds": {"$ref": ref}}})
    assert list(refused.value.errors) == ["steps[1].input_data.seconds"], refused.value.errors
    assert "<step>.<field>" in refused.value.errors["steps[1].input_data.seconds"]
    with pytest.raises(BadInput) as refused:
        await make(engine, settings, owner, {"for_each": {"$ref": ref}})
    # a $ref for_each that is not text is no $ref list at all: "must be a list, or {"$ref": …}"
    assert list(refused.value.errors) == ["steps[1].for_each"], refused.value.errors
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0


async def test_a_ref_with_a_field_is_taken(engine: AsyncEngine, settings: Settings, owner: TestUser) -> None:
    assert await make(engine, settings, owner, {"input_data": {"seconds": {"$ref": "a.n"}}})


def test_a_template_with_a_fixed_ref_without_a_field_is_not_registered() -> None:
    bad = Template(
        name="test.bad_ref",
        title="Bad ref",
        description="",
        steps=(
            TemplateStep(key="a", type="noop"),
            TemplateStep(key="b", type="noop", input={"seconds": {"$ref": "a."}}, depends_on=("a",)),
        ),
    )
    with pytest.raises(ValueError, match=r"steps\[1\]\.input_data\.seconds"):
        pipelines.template(bad)
    assert pipelines.get_template("test.bad_ref") is None


def test_a_schedule_refuses_a_template_whose_pipeline_has_a_ref_without_a_field(settings: Settings) -> None:
    built = Template(
        name="test.built_bad_ref",
        title="Built bad ref",
        description="",
        steps=(
            TemplateStep(key="a", type="noop"),
            TemplateStep(
                key="b", type="noop", input=lambda _v: {"seconds": {"$ref": "a"}}, depends_on=("a",)
            ),
        ),
    )
    pipelines.template(built)
    try:
        with pytest.raises(BadInput) as refused:
            schedules.check_schedule("0 * * * *", "UTC", None, "test.built_bad_ref", {}, settings)
        assert "steps[1].input_data.seconds" in refused.value.errors, refused.value.errors
    finally:
        pipelines.TEMPLATES.pop("test.built_bad_ref", None)
