"""The input edge: what no handler should have to meet is refused before any handler runs, with a 422
whose ``errors`` name the field.

* A NUL character or a lone surrogate in a query parameter (name or value), or in a urlencoded or
  multipart form field (name, value, or an uploaded file's name). PostgreSQL text cannot hold a NUL,
  and a lone surrogate cannot be encoded, so either would otherwise fail deep inside a query — as a 500,
  or as a 422 that cannot say which field was wrong.
* A multipart form field that is not text: bytes that are not UTF-8 (or not the ``charset`` its part
  names, or a ``charset`` Python does not know), which is also what a file sent without a file name is.
  The form parser decodes every part without one as text and would fail with a 500; this is a 422
  naming the form. Litestar's reader decodes the parts inside one loop, so a form that shows its own
  errors cannot show this one beside its field (browsers send UTF-8 and replace lone surrogates: only a
  hand-made request meets it).
* A urlencoded form field or a query parameter whose bytes (after ``%`` decoding) are not UTF-8. The
  parser reads them with replacement characters, so ``name=ab%FFc`` was stored as ``ab\ufffdc``: a
  value the person never typed, saved without a word.
* A body sent to an API route that declares none (cancel, pause, enable…), unless it is empty or ``{}`` (not ``null``)
  (:func:`app.web.body_fields.refuse_body`): ignoring it let ``{"paused": false}`` pause a type. A
  route that reads its body itself (the API's upload: a form) says so with ``opt={READS_BODY: True}``.
* A query parameter an API route does not take (:func:`refuse_unknown_query`): ``GET /api/jobs?q=zzz``
  or ``?pipeline_id=…`` answered with every job, as if the filter had matched, while a body's unknown
  field is refused (:mod:`app.web.body_fields`). Pages keep their own rules (a bookmark may carry old
  parameters). So is one given empty (``?type=``, ``?status=``), one answer for every parameter; and,
  on pages too, one that takes a single value given twice.
* A value not written as a whole number for a query parameter that takes one
  (:func:`refuse_fractional_whole`), on pages and the API alike: the decoder read ``?limit=2.0`` as 2
  and ``1e1`` as 10.
* A body sent to a route that reads JSON in any other type — a form (multipart or urlencoded),
  ``text/plain``, or with no ``Content-Type`` at all: a 415 saying to send JSON (:func:`refuse_not_json`,
  the one rule for every such route). The decoder read any body as JSON whatever its type claimed, so
  ``text/plain`` started a job. A request without a body (an action such as cancel or retry, or an
  optional body left out) names no type and is not refused. A form is refused before it is read:
  reading a multipart form uses up the body as it goes, so the JSON reader then waited for bytes that
  never came, until the client gave up.
* An empty body sent to a route that must be sent a JSON body: "the body is empty; send a JSON object",
  where the decoder named only its own argument (``data: 'data'``).
* A JSON body nested deeper than :data:`MAX_JSON_DEPTH` levels. Decoding — and every walk over the
  value after it — recurses once per level, and Python's stack gives out near 1,000 levels.

Before any of that, a body larger than the route may take is refused with a 413 saying the limit in
words (:func:`body_limit`), from its ``Content-Length`` before a byte of it is read, or as soon as a body
sent in chunks grows past it: ``UPLOAD_MAX_BYTES`` is for routes that take files (``opt={UPLOADS:
True}``); a JSON body or a form without files may be far smaller. Reading, decoding and checking a body
of tens of megabytes took seconds of the one event loop every request shares.

A form handler that shows each error next to its field (keeping what was typed) opts out of the form
check with ``opt={FORM_CHECKED: True}``: the guard then refuses nothing of the form's fields and records
instead what it would have refused — NUL characters, lone surrogates, bytes that are not UTF-8 (which
the parser would have replaced, so the handler could not see them) — and the handler takes them from
:func:`form_problems`, the one rule every such form shows beside its fields. Its query string and JSON
are still checked, and a test posts each kind of unstorable text in every field of every form.

Checks are cheap when nothing is wrong: the query string and the JSON body are scanned as bytes first,
and a form is parsed once (the CSRF check and the handler reuse the parsed form).
"""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin
from urllib.parse import unquote_to_bytes

from litestar.datastructures import UploadFile
from litestar.enums import RequestEncodingType, ScopeType
from litestar.exceptions import ClientException
from litestar.middleware import ASGIMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send

from app.errors import BadInput, NotJson, TooLarge
from app.formatting import format_bytes, format_sizes
from app.settings import Settings
from app.spreadsheets import MAX_ROWS
from app.web.body_fields import refuse_body
from app.web.param_words import parameter_words

FORM_CHECKED = "form_text_checked"
"""Route ``opt`` key: the handler itself refuses NUL characters and lone surrogates in its form fields."""

READS_BODY = "reads_body"
"""Route ``opt`` key: an API route without a declared body that reads its body itself (a form, bytes)."""

UPLOADS = "takes_uploads"
"""Route ``opt`` key: a route whose body may carry files, up to ``UPLOAD_MAX_BYTES`` (:func:`body_limit`)."""

API_PREFIX = "/api/"

ROW_ROOM = 512
"""Bytes of JSON a batch's row may take on average within :func:`body_limit`'s limit (an ``http.request``
row with a long URL is about 150): a batch of :data:`~app.spreadsheets.MAX_ROWS` rows fits."""

MAX_JSON_DEPTH = 100
"""Deepest nesting of arrays and objects accepted in a JSON body; job inputs need a handful of levels."""

NUL_MESSAGE = "contains a NUL character, which cannot be stored; remove it"
SURROGATE_MESSAGE = "contains a lone surrogate, which is not valid text; remove it"
UNREADABLE_FORM_MESSAGE = (
    "a field is not UTF-8 text (a file must be sent with its file name); nothing was saved"
)
LONG_NAME_MESSAGE = (
    "a file's name (or a field's name) in this form is too long to read: give the file a name of at most "
    "a few hundred characters and send it again; nothing was saved"
)
TOO_MANY_PARTS_MESSAGE = (
    "this form has more than 1,000 fields or files; send fewer at once; nothing was saved"
)
NOT_UTF8_MESSAGE = "is not UTF-8 text; nothing was saved"
FILE_NAME_NOT_UTF8_MESSAGE = (
    "the name of the file sent as {field!r} is not UTF-8 text: rename the file (or send its name in "
    "UTF-8) and send it again; nothing was saved"
)
FIELD_NAME_NOT_UTF8_MESSAGE = "a field's name in this form is not UTF-8 text; nothing was saved"
NOT_JSON_MESSAGE = "this request takes a JSON body: send JSON (Content-Type: application/json), not {kind}"
EMPTY_BODY_MESSAGE = "the body is empty; send a JSON object (Content-Type: application/json)"
DEPTH_MESSAGE = f"the JSON is nested more than {MAX_JSON_DEPTH} levels deep; flatten it"

_BAD_TEXT = re.compile("[\x00\ud800-\udfff]")
# UTF-8 of U+D800…U+DFFF: not valid UTF-8, but some encoders write it for a lone surrogate
_SURROGATE_UTF8 = re.compile(rb"\xed[\xa0-\xbf][\x80-\xbf]")
# what may stand for a byte that is not ASCII (or a NUL) in urlencoded text: without one, it is all ASCII
_NOT_PLAIN_ASCII = re.compile(rb"[\x00\x80-\xff]|%(?:[89a-fA-F][0-9a-fA-F]|00)")
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_OPENING = frozenset(b"[{")


def _field_name(raw: str | bytes) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return _BAD_TEXT.sub("\ufffd", text)[:100] or "(unnamed)"


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be taken as text (a NUL or a lone surrogate), or ``None``."""
    bad = _BAD_TEXT.search(value)
    if bad is None:
        return None
    return NUL_MESSAGE if bad.group() == "\x00" else SURROGATE_MESSAGE


def _bytes_problem(raw: bytes) -> str | None:
    if b"\x00" in raw:
        return NUL_MESSAGE
    if _SURROGATE_UTF8.search(raw):
        return SURROGATE_MESSAGE
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8_MESSAGE
    return None


def urlencoded_problems(encoded: bytes) -> dict[str, str]:
    """Each parameter of a query string or a urlencoded form body whose name or value, as bytes, holds a
    NUL, a lone surrogate or bytes that are not UTF-8: its name (as the parser reads it) → the problem."""
    problems: dict[str, str] = {}
    if not _NOT_PLAIN_ASCII.search(encoded):
        return problems
    for part in encoded.split(b"&"):
        raw_name, _, raw_value = part.partition(b"=")
        name = unquote_to_bytes(raw_name.replace(b"+", b" "))
        value = unquote_to_bytes(raw_value.replace(b"+", b" "))
        problem = _bytes_problem(name) or _bytes_problem(value)
        if problem is not None:
            problems.setdefault(name.decode("utf-8", "replace"), problem)
    return problems


def check_urlencoded(encoded: bytes, *, query: bool = False) -> None:
    """A query string (``query``: an address saves nothing, so its words do not say so) or a urlencoded
    form body, checked as the bytes it decodes to.

    Raises:
        BadInput: a parameter's name or value holds a NUL, a lone surrogate or bytes that are not UTF-8
        (the error names it).
    """
    for name, problem in urlencoded_problems(encoded).items():
        said = problem.removesuffix("; nothing was saved") if query else problem
        raise BadInput.field(_field_name(name), said)


def parsed_problems(items: list[tuple[str, Any]]) -> dict[str, str]:
    """Each parsed form field whose name, value or uploaded file name holds a NUL or a lone surrogate:
    its name → the problem."""
    problems: dict[str, str] = {}
    for name, value in items:
        if isinstance(value, UploadFile):
            text = value.filename or ""
        else:
            text = value if isinstance(value, str) else ""
        problem = text_problem(name) or text_problem(text)
        if problem is not None:
            problems.setdefault(name, problem)
    return problems


def check_form(items: list[tuple[str, Any]]) -> None:
    """Raises:
    BadInput: a field's name, value or uploaded file name holds a NUL or a lone surrogate.
    """
    for name, problem in parsed_problems(items).items():
        raise BadInput.field(_field_name(name), problem)


def form_problems(request: Any) -> dict[str, str]:
    """The rule every form that shows its own errors (``FORM_CHECKED``) applies to its fields: each
    field whose text cannot be taken — a NUL character (PostgreSQL cannot store it), a lone surrogate
    (not text), bytes that are not UTF-8 (which the parser replaced, so the value shown is not what was
    sent) — by its name as the handler's form has it, with the problem as a sentence to show beside it.
    Empty when all is well."""
    found = dict(request.scope.get(_PROBLEMS_KEY) or {})
    for name, problem in found.items():
        found[name] = f"{problem[:1].upper()}{problem[1:]}."
    return found


def problems_beside(request: Any, controls: Any, other: str) -> dict[str, str]:
    """:func:`form_problems` keyed as the form shows its errors: a control's problem under ``controls``'
    key for it (a mapping name → error key, or a collection of names that are their own keys), any other
    field's (a hidden one, a name no control has) under ``other``, naming the field."""
    keys = controls if hasattr(controls, "get") else {c: c for c in controls}
    errors: dict[str, str] = {}
    for name, problem in form_problems(request).items():
        if name in keys:
            errors.setdefault(keys[name], problem)
        else:
            sentence = f"{problem[:1].lower()}{problem[1:]}".removesuffix(".")
            errors.setdefault(other, f"The form's field {shown_name(name)!r} {sentence}.")
    return errors


def shown_name(name: str) -> str:
    """A field's name fit to show in a sentence (what cannot be shown replaced, cut to 100 characters)."""
    return _field_name(name)


def _reads_json(scope: Scope) -> bool:
    """Whether the route's declared body is read as JSON (Litestar's default media type)."""
    handler = scope.get("route_handler")
    field = handler.parsed_data_field if handler is not None else None
    if field is None:
        return False
    media_type = getattr(field.kwarg_definition, "media_type", RequestEncodingType.JSON)
    return bool(media_type == RequestEncodingType.JSON)


def _needs_json(scope: Scope) -> bool:
    """Whether the route reads a JSON body that must be given (not ``Body | None = None``)."""
    handler = scope.get("route_handler")
    field = handler.parsed_data_field if _reads_json(scope) and handler is not None else None
    return field is not None and not (field.is_optional or field.has_default)


def _sent_as(content_type: str) -> str:
    if content_type in (RequestEncodingType.URL_ENCODED, RequestEncodingType.MULTI_PART):
        return f"a form ({content_type})"
    return content_type or "a body without a Content-Type"


async def refuse_not_json(request: Any) -> None:
    """The one rule for every route that reads a JSON body: a body sent in another type (see the module
    docstring) is refused before anything reads it. A form's type alone decides (its body is not read
    here: a multipart body is used up as it is read); for any other type, only a body that is there.

    Raises:
        NotJson: (415) saying to send JSON with ``Content-Type: application/json``.
    """
    if not _reads_json(request.scope):
        return
    content_type = request.content_type[0]
    if _is_json(content_type):
        return
    forms = (RequestEncodingType.URL_ENCODED, RequestEncodingType.MULTI_PART)
    if content_type in forms or (await request.body()).strip():
        raise NotJson(NOT_JSON_MESSAGE.format(kind=_sent_as(content_type)))


async def read_form(request: Any) -> Any:
    """The request's form, parsed once for the whole request (the CSRF check, this guard and the handler
    share it).

    Raises:
        NotJson: the route reads JSON (:func:`refuse_not_json`).
        BadInput: (``form``) a field that is not text in its part's character set; a file or field name
        that is not UTF-8 (naming the file's field); a file or field name longer than the parser reads (:data:`LONG_NAME_MESSAGE`); more parts than it reads.
    """
    await refuse_not_json(request)
    try:
        return await request.form()
    except (UnicodeDecodeError, LookupError):  # LookupError: a charset Python does not know
        raise BadInput.field("form", UNREADABLE_FORM_MESSAGE) from None
    except ClientException as exc:
        # Litestar answers a multipart parser's limit with a 400 "Request Entity Too Large" whatever the
        # body's size; the parser's own reason is the exception's context.
        why = str(exc.__context__ or "")
        named = _undecodable_header(exc.__context__)
        if named is not None:
            raise BadInput.field("form", named) from None
        if "header length" in why:
            raise BadInput.field("form", LONG_NAME_MESSAGE) from None
        if "segment count" in why:
            raise BadInput.field("form", TOO_MANY_PARTS_MESSAGE) from None
        raise


_FILE_NAME = re.compile(rb"""filename\*?=("[^"]*"|[^;\r\n]*)""")
_PART_NAME = re.compile(rb"""(?:^|;)\s*name=("[^"]*"|[^;\r\n]*)""")


def _undecodable_header(error: BaseException | None) -> str | None:
    """What a multipart part's header that is not UTF-8 (a file's name written in another encoding)
    holds, in words naming the file's field; ``None`` for any other parser error. The parser (which
    Litestar answers with a bare 400 "Invalid multipart/form-data") keeps the decoding error, with the
    header's bytes, as its argument."""
    found = next((a for a in getattr(error, "args", ()) if isinstance(a, UnicodeDecodeError)), None)
    if found is None or not isinstance(found.object, bytes):
        return None
    header = found.object
    file_name = _FILE_NAME.search(header)
    if file_name is not None and file_name.start(1) <= found.start < file_name.end(1):
        part = _PART_NAME.search(header)
        field = part.group(1).strip(b'"').decode("utf-8", "replace") if part else ""
        return FILE_NAME_NOT_UTF8_MESSAGE.format(field=_field_name(field))
    return FIELD_NAME_NOT_UTF8_MESSAGE


def json_depth(body: bytes, stop_at: int = MAX_JSON_DEPTH) -> int:
    """How deeply arrays and objects nest in the JSON text ``body`` (brackets inside strings do not
    count); stops counting once past ``stop_at``. Linear in the body's size, without recursion."""
    if body.count(b"[") + body.count(b"{") <= stop_at:
        return 0  # cannot be deeper than its number of opening brackets
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for byte in brackets:
        depth = depth + 1 if byte in _OPENING else depth - 1
        if depth > deepest:
            deepest = depth
            if deepest > stop_at:
                break
    return deepest


_PROBLEMS_KEY = "jobdesk.form_problems"
"""Where the guard leaves a ``FORM_CHECKED`` form's problems for :func:`form_problems` (the ASGI scope)."""


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def _checks_own_form(scope: Scope) -> bool:
    handler = scope.get("route_handler")
    return bool(handler is not None and handler.opt.get(FORM_CHECKED))


_QUERY_NAMES = "jobdesk.query_names"
"""Route ``opt`` key where :func:`_query_names` keeps the query parameters a route takes."""
_QUERY_LISTS = "jobdesk.query_lists"
"""Route ``opt`` key for those of them that take several values (``?tag=a&tag=b``)."""


_QUERY_WHOLE = "jobdesk.query_whole"
"""Route ``opt`` key for the query parameters it takes that are whole numbers (``?limit=``)."""
_WHOLE = re.compile(rb"[+-]?[0-9]+")


def _whole_number_type(annotation: Any) -> bool:
    """Whether a parameter declared ``annotation`` takes a whole number (``int``, ``int | None``,
    ``list[int]``; a flag is not one)."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return len(members) == 1 and _whole_number_type(members[0])
    if get_origin(annotation) in (list, tuple, set, frozenset):
        return any(_whole_number_type(a) for a in get_args(annotation))
    return annotation is int


def _query_names(handler: Any, path_params: Any) -> frozenset[str] | None:
    """The query parameters ``handler`` takes (its own and its dependencies', by the names a request
    sends), as Litestar's own reading of its signature finds them; ``None`` when it takes the whole
    query (a ``query`` argument). Worked out once per route and kept in its ``opt``."""
    if _QUERY_NAMES not in handler.opt:
        model = handler.create_kwargs_model(path_parameters=dict.fromkeys(path_params or ()))
        names = (
            None
            if "query" in model.expected_reserved_kwargs
            else frozenset(p.field_alias for p in model.expected_query_params)
        )
        handler.opt[_QUERY_NAMES] = names
        handler.opt[_QUERY_LISTS] = frozenset(
            p.field_alias for p in model.expected_query_params if p.is_sequence
        )
        signature = handler.parsed_fn_signature.parameters
        handler.opt[_QUERY_WHOLE] = frozenset(
            p.field_alias
            for p in model.expected_query_params
            if p.field_name in signature and _whole_number_type(signature[p.field_name].annotation)
        )
    taken: frozenset[str] | None = handler.opt[_QUERY_NAMES]
    return taken


_EMPTY_MEANS_FIRST = frozenset({"after", "before"})
"""Cursors: an empty one is the first page (:func:`app.jobs.cursors.read_cursor`), what a client
passing on the ``next`` of the page before, ``null`` at first, sends."""


def _empty_words(handler: Any, name: str) -> str:
    """What a parameter given empty is told: what it takes, in its declaration's words when there are."""
    words = parameter_words(handler, name)
    takes = words.removeprefix("must be ") if words and words.startswith("must be ") else "a value"
    return f"is empty; give {takes}, or leave {name} out"


def refuse_unknown_query(scope: Scope) -> None:
    """Refuse a query parameter the API route does not take, or gives empty, and one that takes a single
    value given twice to any route (see the module docstring).

    Raises:
        BadInput: naming the first unknown parameter, with the ones the route takes; or one that takes a
            single value given twice (``?limit=5&limit=6`` had silently used one of them); or one given
            empty.
    """
    handler = scope.get("route_handler")
    query = scope.get("query_string", b"")
    if handler is None or not query:
        return
    api = scope.get("path", "").startswith(API_PREFIX)
    names = _query_names(handler, scope.get("path_params"))
    if names is None:
        return
    seen: set[str] = set()
    for part in query.split(b"&"):
        if not part:  # "?a=1&&b=2", a trailing "&": nothing was sent
            continue
        raw, _, value = part.partition(b"=")
        name = unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8", "replace")
        if name not in names:  # "?=x" too: a value for no parameter was read as none at all
            if not api:
                continue
            takes = f"the parameters are {', '.join(sorted(names))}" if names else "it takes none"
            raise BadInput.field(_field_name(name), f"unknown query parameter; {takes}")
        if name in seen and name not in handler.opt[_QUERY_LISTS]:
            # pages too: "/admin/audit?user=x&user=y" filtered by one of the two without a word
            raise BadInput.field(name, "given more than once; it takes one value")
        # a page's filter form sends its empty fields: there an empty value is "any"
        if api and not value and name not in _EMPTY_MEANS_FIRST:
            # one answer for every parameter: "?type=" had listed nothing without a word while
            # "?status=" was refused, and neither filter means "any" when left empty
            raise BadInput.field(name, _empty_words(handler, name))
        seen.add(name)


def refuse_fractional_whole(scope: Scope) -> None:
    """Refuse a value that is not written as a whole number for a query parameter that takes one, on every
    route (pages and API). The decoder reads a query's text leniently: ``?limit=2.0`` was 2 and ``1e1``
    10, where a whole number belongs; the answer is the worded 422 of any other value that does not fit
    (:func:`app.web.param_words.parameter_words`). An empty value is left to the route.

    Raises:
        BadInput: naming the parameter, saying what it takes.
    """
    handler = scope.get("route_handler")
    query = scope.get("query_string", b"")
    if handler is None or not query:
        return
    _query_names(handler, scope.get("path_params"))
    whole: frozenset[str] = handler.opt[_QUERY_WHOLE]
    if not whole:
        return
    for part in query.split(b"&"):
        raw_name, _, raw_value = part.partition(b"=")
        name = unquote_to_bytes(raw_name.replace(b"+", b" ")).decode("utf-8", "replace")
        value = unquote_to_bytes(raw_value.replace(b"+", b" "))
        if name in whole and value and not _WHOLE.fullmatch(value):
            raise BadInput.field(name, parameter_words(handler, name) or "must be a whole number")


def body_limit(settings: Settings, scope: Scope) -> int:
    """The most bytes of body the request's route takes: ``UPLOAD_MAX_BYTES`` for a route that takes
    files (``UPLOADS``); for any other body (JSON, a form without files) four times
    ``JOB_MAX_INPUT_BYTES`` — room for a job's largest input with its other fields — or room for a batch
    of the most rows a batch may have (:data:`ROW_ROOM` each), whichever is more, and never more than
    ``UPLOAD_MAX_BYTES``."""
    handler = scope.get("route_handler")
    if handler is not None and handler.opt.get(UPLOADS):
        return settings.upload_max_bytes
    room = max(4 * settings.job_max_input_bytes, MAX_ROWS * ROW_ROOM)
    return min(settings.upload_max_bytes, room)


def _too_large(size: int | None, limit: int, scope: Scope, upload_limit: int | None) -> TooLarge:
    if limit == upload_limit:  # the limit of any request, files and all
        return TooLarge(f"The request is too large: the limit is {format_bytes(limit)}.")
    hint = ""
    if scope.get("path", "").startswith(API_PREFIX):
        what = "a JSON request"
        hint = (
            " Files go to POST /api/files; a larger batch can be sent as a CSV or XLSX file on its batch "
            "page."
        )
    else:
        what = "a form without files"
    most = format_bytes(limit)
    said = "is larger than that"
    if size is not None:
        body, most = format_sizes(size, limit)
        said = f"is {body}"
    return TooLarge(
        f"The request is too large: the limit for {what} is {most}, and this body {said}."
        f"{hint} Nothing was read or saved."
    )


def refuse_large_body(scope: Scope, receive: Receive, limit: int, upload_limit: int | None = None) -> Receive:
    """Refuse a body over ``limit`` bytes: at once when its ``Content-Length`` says so, else (a body sent
    in chunks, or one longer than it announced) as soon as what was received passes it. Returns the
    ``receive`` every later reader must use. ``upload_limit``: ``UPLOAD_MAX_BYTES``, the limit of every
    request, whose refusal needs fewer words.

    Raises:
        TooLarge: (413) saying the limit in words, now or from the returned ``receive``.
    """
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            announced = int(value) if value.isdigit() else None
            if announced is not None and announced > limit:
                raise _too_large(announced, limit, scope, upload_limit)
    received = 0

    async def capped() -> Any:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise _too_large(None, limit, scope, upload_limit)
        return message

    return capped


def _takes_no_body(scope: Scope) -> bool:
    """Whether the route is an API route that declares no body and reads none itself."""
    handler = scope.get("route_handler")
    if handler is None or not scope.get("path", "").startswith(API_PREFIX):
        return False
    return handler.parsed_data_field is None and not handler.opt.get(READS_BODY)


class BodyLimitMiddleware(ASGIMiddleware):
    """Refuses a body over :func:`body_limit` (413); runs before anything reads a body (the CSRF check
    reads a form's)."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        if scope.get("method", "GET") not in ("GET", "HEAD", "OPTIONS"):
            settings = scope["litestar_app"].state.settings
            receive = refuse_large_body(
                scope, receive, body_limit(settings, scope), settings.upload_max_bytes
            )
        await next_app(scope, receive, send)


class InputGuardMiddleware(ASGIMiddleware):
    """Refuses, with a 422 naming the field, the inputs described in the module docstring; runs for
    every route (pages and API) before its handler."""

    scopes = (ScopeType.HTTP,)

    async def handle(self, scope: Scope, receive: Receive, send: Send, next_app: ASGIApp) -> None:
        check_urlencoded(scope.get("query_string", b""), query=True)
        refuse_unknown_query(scope)
        refuse_fractional_whole(scope)
        if scope.get("method", "GET") not in ("GET", "HEAD", "OPTIONS"):
            request: Any = scope["litestar_app"].request_class(scope=scope, receive=receive)
            content_type, _ = request.content_type
            await refuse_not_json(request)
            if _takes_no_body(scope):
                refuse_body(await request.body())
            elif content_type in (RequestEncodingType.URL_ENCODED, RequestEncodingType.MULTI_PART):
                problems: dict[str, str] = {}
                if content_type == RequestEncodingType.URL_ENCODED:
                    # before parsing: the parser replaces bytes that are not UTF-8, silently
                    problems = urlencoded_problems(await request.body())
                # Parsed here even for a handler that checks its own fields, so that it never meets a
                # form that cannot be read.
                form = await read_form(request)
                for name, problem in parsed_problems(list(form.multi_items())).items():
                    problems.setdefault(name, problem)
                if _checks_own_form(scope):
                    scope[_PROBLEMS_KEY] = problems  # type: ignore[literal-required]
                else:
                    for name, problem in problems.items():
                        raise BadInput.field(_field_name(name), problem)
            elif _is_json(content_type) and json_depth(await request.body()) > MAX_JSON_DEPTH:
                raise BadInput.field("body", DEPTH_MESSAGE)
            if _needs_json(scope) and not (await request.body()).strip():
                raise BadInput.field("body", EMPTY_BODY_MESSAGE)
        await next_app(scope, receive, send)
