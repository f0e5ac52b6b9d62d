"""Batch pages: "Run for each row of a spreadsheet", "One job per file", and a batch's page.

* ``GET /batches`` — your latest batches with their status and progress.
* ``GET /batches/new/{type}`` — upload a CSV or XLSX (or, for a type with a file field, many files).
* ``POST /batches/new/{type}`` — three steps in one form: a new spreadsheet is read (its problems are
  a 422 on the file) and stored as the person's upload, then its columns are matched to the type's
  fields and shown with a select per field (200); "Check and start" converts every row, checks them
  all, and either lists each problem by row and column (422, nothing created) or starts the batch
  (303 to its page). A corrected file can be uploaded on the same page. Many files given to
  ``files`` start one job per file.
* ``GET /batches/{id}`` — progress, counts by status, failed rows and why; ``/status?v=…`` is its
  polled fragment (204 while unchanged, 286 once finished); ``POST /batches/{id}/retry-failed``;
  ``GET /batches/{id}/results.csv`` and ``/results.zip`` — the downloads (:mod:`app.web.batch_downloads`).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import asyncio
import uuid
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from litestar import Controller, Request, Response, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import Redirect, Stream, Template

from app import batches, spreadsheets, text_encoding
from app.actions import access
from app.actions import batches as batch_actions
from app.actions.files import store_upload
from app.auth import requires_user
from app.errors import BadInput, KeyReused, RateLimited
from app.files import clean_name
from app.jobs.cursors import Cursor, page_of, read_cursor
from app.jobs.file_inputs import file_fields
from app.processors import ProcessorSpec, registry
from app.web import DbSession, forms, is_htmx, render, submit
from app.web.batch_downloads import csv_chunks, zip_chunks
from app.web.batch_page import batch_context, batch_state, mapping_view, problems_of
from app.web.deps import (
    POLL_VARY,
    actor_of,
    file_store,
    one_snapshot,
    poll_status,
    sentence,
    settings_of,
    unchanged,
)
from app.web.form_shape import form_errors
from app.web.input_guard import FORM_CHECKED, UPLOADS, form_problems
from app.web.notifications import bell_news

FORM_ERROR = "_form"
PAGE_SIZE = 50
NAME_FIELD = "_name"
NONE_STARTED = "Nothing was started: correct what is shown below."
"""The notice above a form refused beside its fields (the name, a column's choice, a file's name)."""


def _none_started(errors: dict[str, str]) -> dict[str, str]:
    """``errors`` with the notice every refused batch has at the top of the form
    (:data:`app.batches.NOTHING_STARTED`): a problem beside one field does not say that no row went in."""
    top = errors.get(FORM_ERROR)
    if top and "nothing was started" in top.lower():
        return errors
    return {**errors, FORM_ERROR: batches.nothing_started(top) if top else NONE_STARTED}


def _is_upload(value: Any) -> bool:
    return hasattr(value, "filename") and hasattr(value, "file") and bool(getattr(value, "filename", ""))


def _file_field(spec: ProcessorSpec) -> str | None:
    """The type's one-file field, if it has one: many files dropped there start one job each."""
    single = [name for name, kind in file_fields(spec.input_model).items() if kind == "file"]
    return single[0] if single else None


def _read_stored(path: Path, name: str, max_bytes: int, encoding: str) -> spreadsheets.Sheet:
    """A stored spreadsheet read (in a thread): refused, unread, when larger than an upload may be."""
    with path.open("rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise BadInput.field("file", "This file is larger than you can upload.")
    return spreadsheets.read(data, name, max_bytes=max_bytes, encoding=encoding)


ENCODING_FIELD = "encoding"
"""The form's "Text encoding" choice (:data:`app.text_encoding.CHOICES`), carried to the mapping step."""


def _encoding_of(form: Any) -> tuple[str, str | None]:
    """The text encoding the form chose (``auto`` when it sent none), and what is wrong with it."""
    chosen = str(form.get(ENCODING_FIELD) or "auto")
    if chosen in text_encoding.CHOICES:
        return chosen, None
    listed = ", ".join(f'"{label}"' for label in text_encoding.CHOICES.values())
    return "auto", f"Choose one of {listed}."


class BatchesController(Controller):
    """``/batches``: the spreadsheet and many-files forms, batch pages, their fragment and downloads."""

    path = "/batches"
    guards = [requires_user]
    include_in_schema = False

    def _context(self, request: Request[Any, Any, Any], spec: ProcessorSpec, **kw: Any) -> dict[str, Any]:
        return {
            "spec": spec,
            "fields": spreadsheets.fields_of(spec.input_model),
            "file_field": _file_field(spec),
            "form_key": kw.pop("form_key", None) or str(uuid.uuid4()),
            "max_rows": batches.MAX_ROWS,
            "upload_limit": settings_of(request).upload_max_bytes,
            "errors": {},
            "step": None,
            "name": "",
            "encoding": "auto",
            "encodings": text_encoding.CHOICES,
            **kw,
        }

    @get("/", name="batches.list")
    async def batches_list(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        after: Annotated[str | None, QueryParameter()] = None,
    ) -> Template:
        """Your batches, newest first, with their status and progress (one snapshot), :data:`PAGE_SIZE`
        a page, keyset-paginated by ``after`` with Older and Newest links as My jobs is: a person with
        more batches than a page reaches every one of them here, not only through the API."""
        after_id = read_cursor(after, Cursor.ID)  # one it did not give is a 422, not the first page
        await one_snapshot(db_session)
        views = await batches.recent_views(db_session, request.user, PAGE_SIZE + 1, after_id)
        page, older = page_of(views, PAGE_SIZE, lambda v: str(v.id))
        items = [{"batch": v.row, "view": v, "state": batch_state(v)} for v in page]
        return render(
            request,
            "batches/list.html",
            {
                "items": items,
                "older_url": f"/batches?{urlencode({'after': older})}" if older else None,
                "newest_url": "/batches" if after_id else None,
                "paged": bool(after_id),
            },
        )

    @get("/new/{type_name:str}", name="batches.new")
    async def new_batch(self, request: Request[Any, Any, Any], type_name: FromPath[str]) -> Template:
        """The upload form for ``type_name``."""
        spec = access.page_spec(request.user, type_name)
        return render(request, "batches/new.html", self._context(request, spec))

    @post(
        "/new/{type_name:str}",
        name="batches.create",
        status_code=200,
        opt={FORM_CHECKED: True, UPLOADS: True},
    )
    async def create_batch(
        self, request: Request[Any, Any, Any], db_session: DbSession, type_name: FromPath[str]
    ) -> Template | Redirect:
        """Read a spreadsheet, map it, check it, start it — or start one job per uploaded file."""
        spec = access.page_spec(request.user, type_name)
        form = await request.form()
        ctx = self._context(
            request,
            spec,
            form_key=forms.form_key(form.get(forms.FORM_KEY)),
            name=str(form.get("_name") or ""),
        )
        sheet_upload = form.get("sheet")
        files = [u for u in form.getall("files", []) if _is_upload(u)]
        refused = self._refused(request, form, ctx["fields"])
        ctx["encoding"], wrong_encoding = _encoding_of(form)
        if wrong_encoding and ENCODING_FIELD not in refused:
            refused = {**refused, ENCODING_FIELD: wrong_encoding}
        if refused:
            # text that cannot be taken, beside its control, nothing read or stored; the mapping step
            # comes back with its columns as chosen and the name as typed
            if form.get("sheet_id") and not _is_upload(sheet_upload) and not files:
                if "sheet_id" not in form_problems(request):
                    return await self._start_sheet(request, db_session, spec, form, ctx, refused)
            ctx["errors"] = _none_started(refused)
            return render(request, "batches/new.html", ctx, status_code=422)
        if _is_upload(sheet_upload):
            return await self._read_sheet(request, db_session, spec, sheet_upload, ctx)
        if files:
            return await self._per_file(request, db_session, spec, files, ctx)
        if form.get("sheet_id"):
            return await self._start_sheet(request, db_session, spec, form, ctx)
        ctx["errors"] = {"file": "Choose a CSV or XLSX file first."}
        return render(request, "batches/new.html", ctx, status_code=422)

    def _refused(
        self, request: Request[Any, Any, Any], form: Any, fields: list[spreadsheets.SheetField]
    ) -> dict[str, str]:
        """The form's text that cannot be taken, a field it has not or one sent twice
        (:func:`app.web.form_shape.form_errors`), keyed as the page shows errors: the name, a column's
        choice, the spreadsheet or the files (their file names), anything else above the form."""
        controls = {NAME_FIELD: NAME_FIELD, "sheet": "file", "files": "files", ENCODING_FIELD: ENCODING_FIELD}
        controls.update({f"map.{f.name}": f"map.{f.name}" for f in fields})
        return form_errors(
            request,
            form,
            controls,
            FORM_ERROR,
            hidden=(forms.FORM_KEY, "sheet_id"),
            repeatable=("files",),
            nothing="nothing was started",
        )

    async def _load_sheet(
        self, request: Request[Any, Any, Any], db_session: Any, sheet_id: Any, encoding: str
    ) -> tuple[str, spreadsheets.Sheet] | None:
        found = await file_store(request).owned_files(
            await db_session.connection(), request.user.id, [sheet_id]
        )
        stored = next(iter(found.values()), None)
        if stored is None:
            return None
        # off the event loop: a workbook takes seconds of CPU to read (and the file may be a job's output,
        # of any size: refused unread above the upload limit)
        try:
            sheet = await asyncio.to_thread(
                _read_stored,
                stored.path,
                str(stored.row["name"]),
                settings_of(request).upload_max_bytes,
                encoding,
            )
        except FileNotFoundError:  # its row is here, its bytes are not (removed from the disk meanwhile)
            return None
        return str(stored.row["id"]), sheet

    async def _read_sheet(
        self,
        request: Request[Any, Any, Any],
        db_session: Any,
        spec: ProcessorSpec,
        upload: Any,
        ctx: dict[str, Any],
    ) -> Template:
        settings = settings_of(request)
        data = await upload.read()
        if len(data) > settings.upload_max_bytes:
            ctx["errors"] = {"file": "This file is larger than you can upload."}
            return render(request, "batches/new.html", ctx, status_code=413)
        try:
            # off the event loop: a workbook takes seconds of CPU to read, and the pages must not wait
            sheet = await asyncio.to_thread(
                spreadsheets.read,
                data,
                clean_name(upload.filename) if upload.filename else "spreadsheet.csv",
                max_bytes=settings.upload_max_bytes,
                encoding=ctx["encoding"],
            )
        except BadInput as exc:
            ctx["errors"] = {"file": exc.errors.get("file") or exc.detail}
            return render(request, "batches/new.html", ctx, status_code=422)
        await upload.seek(0)
        read_key = ctx["form_key"]
        try:
            # With the form's key: the step sent again (a reload, the back button, a double click)
            # reads the file stored the first time instead of storing (and counting) it again.
            row, problem, _ = await store_upload(
                upload,
                await db_session.connection(),
                file_store(request),
                user_id=request.user.id,
                max_bytes=settings.upload_max_bytes,
                person=request.user,
                settings=settings,
                form_key=read_key,
            )
        except RateLimited as exc:
            row, problem = None, exc.detail
        if row is None:
            ctx["errors"] = {"file": problem or "This file could not be stored."}
            return render(request, "batches/new.html", ctx, status_code=422)
        fields = ctx["fields"]
        # A key of its own for each file read, the same for a repeat of the read: a double click on
        # "start" makes one batch (so does the read sent again, then "start"), and the same form used
        # again with another file (the back button) makes a new one.
        ctx["form_key"] = str(uuid.uuid5(uuid.UUID(read_key), str(row["id"])))
        ctx["step"] = mapping_view(
            str(row["id"]), sheet, fields, spreadsheets.match_columns(fields, sheet.columns)
        )
        if not ctx["name"]:
            ctx["name"] = f"{spec.title} — {sheet.name}"[:200]
        return render(request, "batches/new.html", ctx)

    async def _start_sheet(
        self,
        request: Request[Any, Any, Any],
        db_session: Any,
        spec: ProcessorSpec,
        form: Any,
        ctx: dict[str, Any],
        refused: dict[str, str] | None = None,
    ) -> Template | Redirect:
        """Convert and check every row, then start the batch; with ``refused`` (the form's errors found
        before), the mapping step again with them, nothing started."""
        try:
            loaded = await self._load_sheet(request, db_session, form.get("sheet_id"), ctx["encoding"])
        except BadInput as exc:
            loaded, ctx["errors"] = None, {"file": exc.detail}
        if loaded is None:
            ctx["errors"] = ctx["errors"] or {"file": "That spreadsheet is no longer here. Upload it again."}
            return render(request, "batches/new.html", ctx, status_code=422)
        sheet_id, sheet = loaded
        fields = ctx["fields"]
        sent = {f.name: form.get(f"map.{f.name}") for f in fields}
        chosen, wrong = spreadsheets.chosen_columns(sent, fields, sheet.columns)
        step = ctx["step"] = mapping_view(sheet_id, sheet, fields, chosen)
        refused = {**{f"map.{name}": words for name, words in wrong.items()}, **(refused or {})}
        if refused:
            ctx["errors"] = _none_started(refused)
            return render(request, "batches/new.html", ctx, status_code=422)
        numbers = [n for n, _ in sheet.rows]
        try:
            rows = spreadsheets.row_inputs(fields, sheet.rows, chosen)
            async with db_session.begin_nested():
                batch, _ = await batch_actions.submit(
                    db_session,
                    actor_of(request),
                    spec.type,
                    rows,
                    name=ctx["name"],
                    source=f"spreadsheet {sheet.name}",
                    row_numbers=numbers,
                    form_key=ctx["form_key"],
                )
        except KeyReused as exc:
            return self._sent_before(request, ctx, exc)
        except BadInput as exc:
            if "name" in exc.errors:  # the batch's own name, checked (and refused whole) by the action
                ctx["errors"] = _none_started({NAME_FIELD: sentence(exc.errors["name"])})
                return render(request, "batches/new.html", ctx, status_code=422)
            step.problems = problems_of(
                exc.errors or {"": exc.detail}, numbers, fields, sheet.columns, chosen
            )
            ctx["errors"] = {FORM_ERROR: "Nothing was started: fix these rows, or choose other columns."}
            return render(request, "batches/new.html", ctx, status_code=422)
        except RateLimited as exc:
            ctx["errors"] = {FORM_ERROR: batches.nothing_started(exc.detail)}
            return render(request, "batches/new.html", ctx, status_code=429, headers=exc.extra.get("headers"))
        return Redirect(f"/batches/{batch['id']}", status_code=303)

    async def _per_file(
        self,
        request: Request[Any, Any, Any],
        db_session: Any,
        spec: ProcessorSpec,
        uploads: list[Any],
        ctx: dict[str, Any],
    ) -> Template | Redirect:
        field = ctx["file_field"]
        settings = settings_of(request)
        if field is None:
            ctx["errors"] = {"files": "This job type takes no file."}
            return render(request, "batches/new.html", ctx, status_code=422)
        if len(uploads) > batches.MAX_ROWS:
            ctx["errors"] = {"files": f"At most {batches.MAX_ROWS:,} files at once."}
            return render(request, "batches/new.html", ctx, status_code=422)
        # The form sent again (a double click) is read whole: each file it repeats (same key, name and
        # bytes) is the file stored the first time (store_upload's form key), so the rows ask for the
        # same batch and the action answers with it; other files are refused (KeyReused).
        stored: list[Any] = []
        try:
            async with db_session.begin_nested():
                rows = []
                for upload in uploads:
                    row, problem, _ = await store_upload(
                        upload,
                        await db_session.connection(),
                        file_store(request),
                        user_id=request.user.id,
                        max_bytes=settings.upload_max_bytes,
                        person=request.user,
                        settings=settings,
                        form_key=ctx["form_key"],
                    )
                    if row is None:
                        raise BadInput.field("files", f"{clean_name(upload.filename)}: {problem}")
                    stored.append(row["id"])
                    rows.append({field: str(row["id"])})
                batch, _ = await batch_actions.submit(
                    db_session,
                    actor_of(request),
                    spec.type,
                    rows,
                    name=ctx["name"] or f"{spec.title} — {len(rows)} files",
                    source="files",
                    form_key=ctx["form_key"],
                )
        except (KeyReused, BadInput, RateLimited) as exc:
            # the savepoint took the rows of the files stored here; the form shown again keeps none
            await file_store(request).remove_unrecorded(await db_session.connection(), stored)
            if isinstance(exc, KeyReused):
                return self._sent_before(request, ctx, exc)
            detail = exc.detail
            if isinstance(exc, BadInput) and exc.errors:
                detail = "; ".join(f"{p}: {m}" for p, m in list(exc.errors.items())[:5])
            ctx["errors"] = {"files": batches.nothing_started(detail)}
            return render(request, "batches/new.html", ctx, status_code=exc.status_code)
        return Redirect(f"/batches/{batch['id']}", status_code=303)

    def _sent_before(self, request: Request[Any, Any, Any], ctx: dict[str, Any], exc: KeyReused) -> Template:
        """The form's key started a batch of other rows: the form again, saying so, with a link to that
        batch and a new key (sending it again starts a new batch)."""
        message, ctx["sent_before"] = submit.sent_before(exc)
        ctx["errors"] = {FORM_ERROR: message}
        ctx["form_key"] = str(uuid.uuid4())
        return render(request, "batches/new.html", ctx, status_code=422)

    @get("/{batch_id:str}", name="batches.detail")
    async def batch_page(
        self, request: Request[Any, Any, Any], db_session: DbSession, batch_id: FromPath[str]
    ) -> Template:
        """A batch's page: its counts and the failed rows listed below them are read from one snapshot
        (read one by one, a row that failed between the reads was listed but not counted)."""
        await one_snapshot(db_session)
        ctx = await batch_context(db_session, batch_id, request.user)
        return render(request, "batches/detail.html", ctx, fragment="batches/_status.html")

    @get("/{batch_id:str}/status", name="batches.status")
    async def batch_status(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        batch_id: FromPath[str],
        v: Annotated[str | None, QueryParameter()] = None,
        bell: Annotated[int | None, QueryParameter(ge=0, le=2**62)] = None,
    ) -> Template | Response[Any]:
        """The polled fragment: 204 while unchanged; 286 with the final state once finished; the bell
        out of band when the viewer's unread count is no longer ``bell``. One snapshot, as the page."""
        await one_snapshot(db_session)
        ctx = await batch_context(db_session, batch_id, request.user)
        if not is_htmx(request):
            return render(request, "batches/detail.html", ctx, headers=POLL_VARY)
        finished = ctx["state"]["finished"]
        quiet = unchanged(v, ctx["state"]["version"], finished)
        news = bell_news(ctx["unread"], bell)
        if quiet is not None and not news:
            return quiet
        ctx["bell"] = ctx["unread"] if bell is not None else None
        return render(
            request, "batches/_status.html", ctx, status_code=poll_status(finished), headers=POLL_VARY
        )

    @post("/{batch_id:str}/retry-failed", name="batches.retry_failed", status_code=200)
    async def retry_failed(
        self, request: Request[Any, Any, Any], db_session: DbSession, batch_id: FromPath[str]
    ) -> Template:
        outcome = await batch_actions.retry_failed(db_session, actor_of(request), batch_id)
        ctx = await batch_context(
            db_session, outcome.batch_id, request.user, notice=outcome.message, notice_ok=outcome.retried > 0
        )
        name = "batches/_status.html" if is_htmx(request) else "batches/detail.html"
        return render(request, name, ctx)

    async def _download_parts(
        self, request: Request[Any, Any, Any], db_session: Any, batch_id: str
    ) -> tuple[Any, list[str]]:
        row = await batches.load(db_session, batch_id, request.user)
        spec = registry.get(row["type"])
        fields = [f.name for f in spreadsheets.fields_of(spec.input_model)] if spec else []
        return row, fields

    @get("/{batch_id:str}/results.csv", name="batches.results_csv")
    async def results_csv(
        self, request: Request[Any, Any, Any], db_session: DbSession, batch_id: FromPath[str]
    ) -> Stream:
        """Every row's input, status, result and error as CSV (owner or admin), streamed."""
        row, fields = await self._download_parts(request, db_session, batch_id)
        return Stream(
            csv_chunks(request.app.state.engine, row["id"], fields),
            media_type="text/csv",  # Litestar adds "; charset=utf-8" to text/ types itself
            headers={"Content-Disposition": f'attachment; filename="batch-{row["id"]}-results.csv"'},
        )

    @get("/{batch_id:str}/results.zip", name="batches.results_zip")
    async def results_zip(
        self, request: Request[Any, Any, Any], db_session: DbSession, batch_id: FromPath[str]
    ) -> Stream:
        """``results.csv`` and every file the rows produced, in one zip (owner or admin), streamed."""
        row, fields = await self._download_parts(request, db_session, batch_id)
        chunks = zip_chunks(request.app.state.engine, file_store(request), row["id"], row["user_id"], fields)
        return Stream(
            chunks,
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="batch-{row["id"]}-results.zip"'},
        )
