"""A multipart form read so that a text part which is not text is one field's problem, not the whole
form's.

Litestar's reader (``litestar._multipart.parse_multipart_form``) decodes every part without a file name
with ``bytes.decode(charset)`` inside its loop, so one part in Latin-1 (or in a ``charset`` Python does
not know, or a file sent without its file name) raises out of the whole parse: every other field is
lost with it, and a form that shows its errors beside its fields cannot even say which one. Its parser
(``multipart.PushMultipartParser``) has no hook for the decoding, so this is Litestar's loop around the
same parser, with the same upload files, part limit and errors, decoding each text part by itself: a
part that cannot be decoded is kept with replacement characters and named in the problems returned.
Only the forms that show their own errors (``FORM_CHECKED``) are read this way.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from litestar.datastructures import UploadFile
from litestar.exceptions import ClientException
from litestar.utils.compat import async_next
from multipart import (
    MultipartSegment,
    ParserError,
    ParserLimitReached,
    PushMultipartParser,
)


def _decoded(data: bytes, charset: str) -> tuple[str, bool]:
    """The part's text, and whether it was text in ``charset`` (otherwise: UTF-8 with replacements)."""
    try:
        return data.decode(charset), True
    except (UnicodeDecodeError, LookupError):  # LookupError: a charset Python does not know
        return data.decode("utf-8", "replace"), False


async def _close_all(fields: dict[str, list[Any]], data: Any) -> None:
    if isinstance(data, UploadFile):
        await data.close()
    for values in fields.values():
        for value in values:
            if isinstance(value, UploadFile):
                await value.close()


async def parse_multipart(
    stream: Any, boundary: bytes, part_limit: int
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The form as Litestar's reader returns it (name → value, or a list of values), and the raw bytes of
    each text part that was not text in its ``charset`` (by the part's name; the first such part).

    Raises:
        ClientException: the body is not multipart, or has more than ``part_limit`` parts (as Litestar's).
    """
    fields: defaultdict[str, list[Any]] = defaultdict(list)
    unreadable: dict[str, bytes] = {}
    data: UploadFile | bytearray = bytearray()
    chunk = await async_next(stream, b"")
    if not chunk:
        return fields, unreadable
    try:
        with PushMultipartParser(boundary, max_segment_count=part_limit) as parser:
            segment: MultipartSegment | None = None
            while not parser.closed:
                for part in parser.parse(chunk):  # an empty chunk (the body's end) closes the parser
                    if isinstance(part, MultipartSegment):
                        segment = part
                        if segment.filename:
                            data = UploadFile(
                                content_type=segment.content_type or "text/plain",
                                filename=segment.filename,
                                headers=dict(segment.headerlist),
                            )
                    elif part:
                        if isinstance(data, UploadFile):
                            await data.write(part)
                        else:
                            data.extend(part)
                    else:
                        if segment is None:
                            raise ClientException("Unexpected eof in multipart/form-data")
                        if isinstance(data, UploadFile):
                            await data.seek(0)
                            fields[segment.name].append(data)
                        else:
                            text, ok = _decoded(bytes(data), segment.charset or "utf-8")
                            if not ok:
                                unreadable.setdefault(segment.name, bytes(data))
                            fields[segment.name].append(text)
                        data, segment = bytearray(), None
                chunk = await async_next(stream, b"")
    except ParserError as exc:
        await _close_all(fields, data)
        raise ClientException("Invalid multipart/form-data") from exc
    except ParserLimitReached:
        await _close_all(fields, data)
        raise ClientException("Request Entity Too Large") from None
    return {k: v if len(v) > 1 else v[0] for k, v in fields.items()}, unreadable
