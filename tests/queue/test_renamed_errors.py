"""An error from a bulk enqueue in the caller's names (:func:`app.jobs.queue.many_jobs.renamed`) is the same
error: a reused key stays a :class:`KeyReused` with what it says about the first request (a web layer that
answers a repeat with the job its key made reads them), a 413 of many fields stays a 413, and only the
names of the fields change."""

from __future__ import annotations

from app.errors import BadInput, KeyReused, TooLarge, TooLargeFields
from app.jobs.queue.many_jobs import renamed

INPUTS = ["steps[0].input_data", "steps[2].for_each[1]"]


def test_a_reused_key_keeps_its_class_and_what_it_says_about_the_first_request() -> None:
    exc = KeyReused(
        "was used for a different request",
        field="jobs[1].idempotency_key",
        existing_id="j-1",
        differs=("input_data",),
    )
    out = renamed(exc, INPUTS)
    assert type(out) is KeyReused
    assert isinstance(out, KeyReused)  # for mypy
    assert (out.kind, out.existing_id, out.differs) == ("job", "j-1", ("input_data",))
    assert out.key_field == "steps[2].idempotency_key"
    assert out.errors == {"steps[2].idempotency_key": "was used for a different request"}
    assert out.extra["errors"] == out.errors
    assert out.detail == str(out) == "steps[2].idempotency_key: was used for a different request"
    assert out.status_code == 422
    # the original is left as it was
    assert exc.key_field == "jobs[1].idempotency_key" and "jobs[1].idempotency_key" in exc.errors


def test_other_errors_keep_their_class_and_status() -> None:
    many = renamed(
        TooLargeFields("jobs[0].input_data: too big", errors={"jobs[0].input_data": "too big"}), INPUTS
    )
    assert type(many) is TooLargeFields and many.status_code == 413
    assert isinstance(many, BadInput) and many.errors == {"steps[0].input_data": "too big"}
    plain = renamed(BadInput.field("jobs[1].input_data.image", "no such file"), INPUTS)
    assert type(plain) is BadInput and plain.errors == {"steps[2].for_each[1].image": "no such file"}
    large = renamed(
        TooLarge("jobs[0].input_data is too large", field="jobs[0].input_data", extra={"x": 1}), INPUTS
    )
    assert type(large) is TooLarge and large.field == "steps[0].input_data" and large.extra == {"x": 1}
    assert large.detail == "steps[0].input_data is too large"
