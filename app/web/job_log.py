"""A job's log on the web: the log box of the job page (``jobs/_log.html``), the lines its 2-second
poll appends (``hx-swap-oob="beforeend"``, only those after the ``seq`` the page has),
``GET /jobs/{id}/log.txt`` and ``GET /api/jobs/{id}/log``. Each is owner-checked like the job page.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

from typing import Annotated, Any

from litestar import Controller, Request, Response, get
from litestar.params import FromPath, QueryParameter

from app.auth import requires_user
from app.jobs import joblog, queue
from app.jobs.cursors import Cursor, read_cursor
from app.jobs.states import LIVE
from app.web import DbSession
from app.web.openapi import errors


async def log_view(db: Any, row: Any) -> dict[str, Any]:
    """What ``jobs/_log.html`` shows: the lines up to the status row's ``log_seq`` (the poll brings the
    ones after), and whether lines may still come."""
    upto = int(row.get("log_seq") or 0)
    lines = await joblog.read(db, row["id"], upto=upto) if upto else []
    return {"lines": lines, "live": row["status"] in LIVE, "job_id": row["id"]}


def note_view(row: Any) -> dict[str, Any]:
    """What ``jobs/_log_note.html`` needs from a poll's status row: whether the job logged any line and
    whether more may come (the lines themselves are already on the page)."""
    return {"lines": int(row.get("log_seq") or 0) > 0, "live": row["status"] in LIVE, "job_id": row["id"]}


async def new_lines(db: Any, row: Any, after: int | None) -> list[dict[str, Any]]:
    """The lines a poll appends: those after ``after`` up to the row's ``log_seq``; none when the page
    did not say what it has."""
    upto = int(row.get("log_seq") or 0)
    if after is None or upto <= after:
        return []
    return [
        ln for ln in await joblog.read(db, row["id"], after=after, upto=upto) if ln["level"] != joblog.CUT
    ]


def has_news(row: Any, after: int | None) -> bool:
    """Whether lines came since the page's last ``seq`` (a poll then answers even if the status did not
    change)."""
    return after is not None and int(row.get("log_seq") or 0) > after


class JobLogController(Controller):
    """``/jobs/{id}/log.txt``."""

    path = "/jobs"
    guards = [requires_user]
    include_in_schema = False

    @get("/{job_id:str}/log.txt", name="jobs.log")
    async def log_txt(
        self, request: Request[Any, Any, Any], db_session: DbSession, job_id: FromPath[str]
    ) -> Response[str]:
        """The whole log as plain text, as a download."""
        row = await queue.get_job(db_session, job_id, request.user)
        lines = await joblog.read(db_session, row["id"])
        return Response(
            content=joblog.as_text(lines),
            media_type="text/plain",  # Litestar adds "; charset=utf-8" to text/ types itself
            headers={"Content-Disposition": f'attachment; filename="job-{row["id"]}.log"'},
        )


class JobLogApiController(Controller):
    """``GET /api/jobs/{id}/log``."""

    path = "/api/jobs"
    guards = [requires_user]
    tags = ["jobs"]

    @get("/{job_id:str}/log", name="api.jobs.log", responses=errors(401, 404, 422))
    async def log(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        job_id: FromPath[str],
        after: Annotated[str | None, QueryParameter(description="only lines with a greater seq")] = None,
    ) -> dict[str, Any]:
        """The job's log: ``{"lines": [{seq, at, level, text, attempt}], "cut": n}`` — ``cut`` counts the
        oldest lines no longer kept. ``?after=<seq>`` returns only newer lines (poll with the last seq)."""
        since = read_cursor(after, Cursor.SEQ) or 0
        row = await queue.get_job(db_session, job_id, request.user)
        lines = await joblog.read(db_session, row["id"], after=since)
        return {
            "lines": [
                {
                    "seq": ln["seq"],
                    "at": ln["at"].isoformat(),
                    "level": ln["level"],
                    "text": ln["text"],
                    "attempt": ln["attempt"],
                }
                for ln in lines
                if ln["level"] != joblog.CUT
            ],
            "cut": await joblog.cut_total(db_session, row["id"]),
        }
