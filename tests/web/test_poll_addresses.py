"""A poll's address opened without htmx (a reload, a bookmark, a link copied from the developer tools)
answers with the whole page, as ``/jobs/{id}/status`` always did: ``/jobs/{id}/cell`` and
``/pipelines/{id}/cell`` showed a bare status cell, without the page around it."""

from __future__ import annotations

import re

from tests.support.webkit import HX, Site


async def test_every_poll_address_opened_directly_is_the_whole_page(site: Site) -> None:
    client = site.client
    r = await client.post(
        "/api/pipelines",
        json={"name": "Nightly report", "steps": [{"key": "a", "type": "noop", "input_data": {}}]},
        headers=site.bearer,
    )
    assert r.status_code == 201, r.text
    pipeline = r.json()["id"]
    job = site.job_id
    for poll in (f"/jobs/{job}/status", f"/jobs/{job}/cell"):
        direct = await client.get(poll)
        assert direct.status_code == 200 and "<html" in direct.text, f"{poll}: {direct.text[:120]!r}"
        assert '<article id="job-status"' in direct.text, poll
    assert "HX-Request" in direct.headers["vary"]
    assert (await client.get(f"/jobs/{job}/cell", headers=HX)).text.lstrip().startswith('<span id="cell-')
    for poll in (f"/pipelines/{pipeline}/status", f"/pipelines/{pipeline}/cell"):
        direct = await client.get(poll)
        assert direct.status_code == 200 and "<html" in direct.text, f"{poll}: {direct.text[:120]!r}"
        assert "<h1>Nightly report" in direct.text, poll
    hx = await client.get(f"/pipelines/{pipeline}/cell", headers=HX)
    assert hx.text.lstrip().startswith('<span id="cell-'), hx.text[:80]
    # someone else's job or pipeline stays a 404 either way
    assert (await client.get(f"/jobs/{'0' * 8}-0000-7000-8000-{'0' * 12}/cell")).status_code == 404


async def test_every_answer_of_a_poll_address_varies_by_htmx(site: Site) -> None:
    """The page, the fragment and the 204 of an unchanged poll: each answer of an address that answers
    htmx otherwise says so (``Vary: HX-Request``), or a cache could hand a stored fragment to a reload.
    The pipeline's and the batch's ``/status`` fragments, the batch's page and every 204 said nothing."""
    client = site.client
    r = await client.post(
        "/api/pipelines",
        json={"name": "Nightly", "steps": [{"key": "a", "type": "noop", "input_data": {}}]},
        headers=site.bearer,
    )
    assert r.status_code == 201, r.text
    pipeline, job = r.json()["id"], site.job_id
    r = await client.post("/api/batches", json={"type": "noop", "rows": [{}, {}]}, headers=site.bearer)
    assert r.status_code == 201, r.text
    batch = r.json()["id"]
    for poll in (
        f"/batches/{batch}/status",
        f"/jobs/{job}/status",
        f"/jobs/{job}/cell",
        f"/pipelines/{pipeline}/status",
        f"/pipelines/{pipeline}/cell",
    ):
        answers = [await client.get(poll), await client.get(poll, headers=HX)]
        version = re.search(r"[?&]v=([^&\"]+)", answers[-1].text)
        assert version, f"{poll}: no fingerprint in {answers[-1].text[:200]!r}"
        answers.append(await client.get(f"{poll}?v={version.group(1)}", headers=HX))
        assert answers[-1].status_code == 204, poll
        for answer in answers:
            assert "HX-Request" in answer.headers.get("vary", ""), f"{poll} {answer.status_code}"
