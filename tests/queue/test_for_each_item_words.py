"""An item of a ``for_each`` list read from a parent's result that its type's schema refuses: the step's
failure names the item, its field, what it gave and what the field takes, never a form's "Enter a
number" (no person typed the item; an earlier step's result gave it)."""

from __future__ import annotations

from tests.queue.test_for_each import create, jobs_of, run_claimable, step


async def test_an_item_from_a_result_that_fails_the_schema_is_worded_for_the_item(
    engine, settings, owner, pg
) -> None:
    pid = await create(
        engine,
        settings,
        owner,
        [
            step("src", "noop", {"items": [1, "soon"]}),
            step("each", "sleep", {"seconds": {"$item": ""}}, for_each={"$ref": "src.items"}),
        ],
    )
    await run_claimable(engine, settings)
    failed = (await jobs_of(pg, pid))["each"]
    assert failed["status"] == "failed"
    assert failed["error_message"] == (
        "step 'each' could not run once per item: for_each[1].seconds: item 2 of its list gave 'soon' "
        "for 'seconds'; it must be a number"
    )
