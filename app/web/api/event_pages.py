"""A job's or a pipeline's history in the API (``GET /api/jobs/{id}/events``,
``GET /api/pipelines/{id}/events``), in pages read with the one cursor reader the History pages use
(:data:`~app.jobs.cursors.Cursor.ENTRY`: ``?before=<event id>``).

Both answered every event in one list, so a job with 100,000 events sent them all in one answer. Now:

* with ``limit`` or ``before`` (either, even empty): ``{"items": [...], "next": <event id> | null}``,
  newest first, as ``GET /api/jobs`` and ``GET /api/notifications`` page: pass ``next`` back as
  ``before`` for the older events; ``next`` is ``null`` on the page with the first event;
* with neither: the plain list existing clients read, oldest first, of the newest :data:`EVENTS_PAGE`
  events — every event of any but a very long history, as before. A longer one is cut, and says so in a
  ``Link: <…?before=<event id>>; rel="next"`` header (the plain list has no room for ``next``), which
  leads to the paged answer for the older ones.

No ``from __future__ import annotations`` here: Litestar reads the annotations at runtime.
"""

from typing import Annotated, Any
from urllib.parse import quote

from litestar import Request, Response
from litestar.params import QueryParameter

from app.jobs.cursors import Cursor, page_of, read_cursor
from app.web import display

EVENTS_PAGE = 1000
"""The most events one answer holds, and the default: a plain list of this many is a whole history for
all but very long ones."""
EVENTS_END = 2**63 - 1
"""The ``before`` of the first page: above every event id."""

EventsLimit = Annotated[
    int | None,
    QueryParameter(
        ge=1,
        le=EVENTS_PAGE,
        description=f"Events per page (at most {EVENTS_PAGE:,}, the default). Given (or with `before`), the "
        'answer is `{"items", "next"}`, newest first.',
    ),
]
EventsBefore = Annotated[
    str | None,
    QueryParameter(
        description="The `next` of the page before: the events older than that event id (leave it out, or "
        'empty, for the newest). Given, the answer is `{"items", "next"}`, newest first.'
    ),
]


class EventsPage:
    """What a request asked for: ``before`` (an event id, or :data:`EVENTS_END`), ``limit``, and whether
    it asked for the paged shape."""

    def __init__(self, limit: int | None, before: str | None) -> None:
        self.paged = limit is not None or before is not None
        self.limit = limit or EVENTS_PAGE
        self.before = read_cursor(before, Cursor.ENTRY, "before") or EVENTS_END

    @property
    def params(self) -> dict[str, int]:
        """The query's ``before`` and ``limit`` (one row more than the page: :func:`page_of`)."""
        return {"before": self.before, "limit": self.limit + 1}

    def answer(self, request: Request[Any, Any, Any], rows: list[Any]) -> Response[Any]:
        """``rows`` (newest first, ``limit + 1`` fetched) as the answer asked for, each as the viewer may
        read it (:func:`app.web.display.event_for`)."""
        page, older = page_of(rows, self.limit, lambda r: r["id"])
        events = [display.event_for(r, request.user) for r in page]
        if self.paged:
            return Response({"items": events, "next": older})
        headers = {}
        if older is not None:
            headers["Link"] = f'<{quote(request.url.path)}?before={older}>; rel="next"'
        return Response(events[::-1], headers=headers)
