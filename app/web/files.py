"""Files: uploads through the API and downloads.

* ``POST /api/files`` (multipart, field ``file``; Bearer token) → 201 ``{id, name, size, content_type}``;
  the id goes into a job's input (a ``FileId`` field). Above ``UPLOAD_MAX_BYTES`` → 413 naming the limit
  in words; an empty file or no ``file`` part → 422; a file that would take the person's stored files
  above ``USER_MAX_UPLOAD_BYTES`` → 429 with the limit and ``Retry-After`` (:mod:`app.actions.files`). The stored content type is derived from the bytes
  (:func:`app.file_types.derive_type`), not taken from the request.
* ``GET /files/{id}`` (browser session) and ``GET /api/files/{id}`` (Bearer) download a file: the owner
  and admins, and a named approver of a step waiting for their decision the files its result lists
  (:meth:`app.files.FileStore.get`); anyone else gets the same 404 as for an unknown id, so ids cannot be probed. Pictures
  and plain text are served ``inline``, everything else as an ``attachment`` with a safe file name, so
  an uploaded HTML or script file is never shown as a page of this site; the type is one Jobdesk stores
  (else ``application/octet-stream``) and ``X-Content-Type-Options: nosniff`` comes with every response.
  ``?view=1`` shows an HTML result (a report) in the browser tab instead, still under the sandboxing
  Content-Security-Policy of ``/files/``: it runs no script and belongs to no origin.

Uploads through the job and pipeline forms are stored by :mod:`app.web.forms`; a file is removed by
retention together with the job that used or produced it.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from urllib.parse import quote

from litestar import Controller, Request, get, post
from litestar.params import FromPath, QueryParameter
from litestar.response import File

from app.actions.files import store_upload
from app.auth import requires_user
from app.errors import BadInput, NotFound, TooLarge
from app.file_types import INLINE_TYPES, served_type
from app.formatting import format_sizes
from app.web import DbSession
from app.web.deps import file_store, settings_of
from app.web.input_guard import READS_BODY, UPLOADS
from app.web.openapi import errors


@dataclass
class UploadedFile:
    """A stored upload: put ``id`` into a job's input."""

    id: str
    name: str
    size: int
    content_type: str


def content_disposition(name: str, disposition: str = "attachment") -> str:
    """``attachment; filename="ascii"; filename*=UTF-8''percent-encoded`` (RFC 6266): the ASCII
    fallback has no quotes, backslashes or control characters."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    ascii_name = "".join(ch for ch in ascii_name if ch.isprintable() and ch not in '"\\;') or "download"
    return f"{disposition}; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name, safe='')}"


VIEWABLE_TYPES = frozenset({"text/html"})
"""Types shown in a browser tab on ``?view=1`` (a result's HTML report): served inline under
``/files/``'s sandboxing Content-Security-Policy, so the page runs no script and has no origin."""


async def download(request: Request[Any, Any, Any], db: Any, file_id: str, view: bool = False) -> File:
    """The file's bytes as an attachment, if ``request.user`` may read it; with ``view``, an HTML
    report is shown in place (sandboxed) instead.

    Raises:
        NotFound: unknown, malformed or another user's id; or its bytes are gone.
    """
    store = file_store(request)
    row = await store.get(await db.connection(), file_id, request.user)
    path = store.path(row["id"])
    if not path.is_file():
        raise NotFound("This file's contents are no longer available.")
    media_type = served_type(row["content_type"])
    shown = media_type in INLINE_TYPES or (view and media_type in VIEWABLE_TYPES)
    disposition: Literal["inline", "attachment"] = "inline" if shown else "attachment"
    return File(
        path=path,
        filename=row["name"],
        media_type=media_type,
        content_disposition_type=disposition,
        headers={
            "content-disposition": content_disposition(row["name"], disposition),
            "x-content-type-options": "nosniff",
        },
    )


class FilesController(Controller):
    """``GET /files/{id}``: downloads for signed-in people."""

    path = "/files"
    guards = [requires_user]
    include_in_schema = False

    @get("/{file_id:str}", name="files.download")
    async def download_file(
        self,
        request: Request[Any, Any, Any],
        db_session: DbSession,
        file_id: FromPath[str],
        view: Annotated[bool, QueryParameter()] = False,
    ) -> File:
        """Download (owner, admin, or an approver of a waiting step its result lists); 404 otherwise. ``?view=1`` opens an HTML report in the tab."""
        return await download(request, db_session, file_id, view)


NO_FILE_NAME = (
    "the part named 'file' has no file name: send the file with its name "
    '(filename="report.pdf" in the part\'s Content-Disposition; curl -F file=@report.pdf does this)'
)


class FilesApiController(Controller):
    """``/api/files``: upload and download with a Bearer token."""

    path = "/api/files"
    guards = [requires_user]
    tags = ["files"]

    @post(
        "/",
        name="api.files.upload",
        responses=errors(401, 413, 422, 429),
        status_code=201,
        opt={READS_BODY: True, UPLOADS: True},
    )
    async def upload(self, request: Request[Any, Any, Any], db_session: DbSession) -> UploadedFile:
        """Upload one file (multipart form field ``file``); returns its id for a job's input. 413 above
        ``UPLOAD_MAX_BYTES`` (the limit in words), 422 without a file or for an empty one."""
        settings = settings_of(request)
        form = await request.form()
        upload = form.get("file")
        sent = len(form.getall("file")) if upload is not None else 0
        if sent > 1:  # the others would have been dropped without a word
            raise BadInput.field("file", f"send one file per request (this one has {sent} 'file' parts)")
        if upload is None:
            raise BadInput.field("file", "send the file as multipart/form-data in a part named 'file'")
        if isinstance(upload, str) or not getattr(upload, "filename", ""):
            # the parser reads a part without a file name (none, or filename="") as a text field
            raise BadInput.field("file", NO_FILE_NAME)
        row, problem, size = await store_upload(
            upload,
            await db_session.connection(),
            file_store(request),
            user_id=request.user.id,
            max_bytes=settings.upload_max_bytes,
            person=request.user,
            settings=settings,
        )
        if row is None:
            if size > settings.upload_max_bytes:
                said, most = format_sizes(size, settings.upload_max_bytes)
                raise TooLarge(f"The file is {said}; the limit is {most}.")
            raise BadInput.field("file", problem or "the file could not be stored")
        return UploadedFile(
            id=str(row["id"]), name=row["name"], size=row["size"], content_type=row["content_type"]
        )

    @get("/{file_id:str}", name="api.files.download", responses=errors(401, 404))
    async def download_file(
        self, request: Request[Any, Any, Any], db_session: DbSession, file_id: FromPath[str]
    ) -> File:
        """Download a file you own (admins: any file; a step's named approver: the files its result lists
        while it waits for a decision); 404 otherwise."""
        return await download(request, db_session, file_id)
