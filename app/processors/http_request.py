"""``http.request``: send one HTTP request — the webhook delivery most background jobs are.

Retry rules: a 5xx answer, a timeout or a connection failure is a failed attempt, retried with backoff;
a 4xx answer is a permanent failure (the request itself is wrong, sending it again cannot help) — except
408 Request Timeout, 425 Too Early and 429 Too Many Requests, which say "try again later" and are
retried. Redirects are followed (at most 5, http/https only).

Server-side request forgery: people who may start jobs must not be able to make the worker call
services that only it can reach (the database, a worker's metrics port, other local services, another
virtual host of a local proxy). So, for the first request and for every redirect:

- the host name is resolved once, every address it resolves to is checked, and the connection goes to
  the checked address (the name is kept for the ``Host`` header and for TLS: SNI and the certificate
  check), so a second lookup cannot answer differently (DNS rebinding);
- an address that is loopback, private, link-local, multicast or otherwise not public is refused
  (permanently, saying why) unless the request goes to exactly the scheme, host and port of
  ``JOBDESK_BASE_URL``, or to a host (``name`` or ``name:port``) listed in
  ``HTTP_REQUEST_ALLOWED_HOSTS``, or ``HTTP_REQUEST_ALLOW_PRIVATE`` is set;
- at Jobdesk's own address (by any name or loopback address that reaches it) only the JSON API
  (``/api/…``, which needs a Bearer token and ignores cookies) may be requested: a job must not act as a
  browser against Jobdesk's pages and forms (sign-in, account), from the worker's address
  (:data:`~app.processors.addresses.OWN_API_PREFIX`); refused at submission for a URL given as text;
- proxies from the environment are not used (a proxy would resolve the name itself);
- the ``Host`` header and the headers that frame the message cannot be set by the job's input.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator

from app import typed_json
from app.formatting import format_duration, url_host
from app.jobs.backoff import RETRY_AFTER_STATUSES, retry_after_secs
from app.processors import Input, JobContext, LongText, PermanentError, RetryableError, processor
from app.processors.addresses import AddressPolicy, Resolver
from app.processors.inputs import invalid

if TYPE_CHECKING:
    import httpx

BODY_KEEP_CHARS = 20_000
"""Characters of the answer's body kept in ``result_data``."""
READ_CAP_BYTES = 1024 * 1024
"""Bytes of the answer read at most; the rest is not downloaded."""
HEADER_VALUE_CAP = 2_000
RETRYABLE_4XX = frozenset({408, 425, 429})
MAX_REDIRECTS = 5
MIN_TIMEOUT_SECS = 0.1
MAX_TIMEOUT_SECS = 300
TEXT_TYPES = re.compile(r"^(text/|application/([\w.+-]*\+)?(json|xml|javascript|x-www-form-urlencoded)\b)")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]*$")
"""Printable ASCII and tabs: what every HTTP client and server reads the same way."""
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "te", "trailer", "upgrade", "keep-alive"}
)
"""Headers Jobdesk sets itself: the host comes from the address, the others frame the message."""


def parse_headers(text: str) -> dict[str, str]:
    """``Name: value`` lines → a dict (blank lines ignored).

    Raises:
        pydantic_core.PydanticCustomError: a line without a colon, a name with characters HTTP does not
            allow, a value with control or non-ASCII characters, or a header Jobdesk sets itself.
    """
    headers: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise invalid(f"line {number} is not in the form 'Name: value'")
        if not HEADER_NAME.match(name):
            raise invalid(f"line {number}: {name[:50]!r} is not a valid header name")
        if name.lower() in RESERVED_HEADERS:
            raise invalid(
                f"line {number}: the {name} header cannot be set here; Jobdesk sets it from the address "
                "and the body"
            )
        if not HEADER_VALUE.match(value):
            raise invalid(
                f"line {number}: the value of {name} may hold only printable ASCII characters "
                "(no control characters or accented letters)"
            )
        headers[name] = value
    return headers


class HttpRequestInput(Input):
    """Input of ``http.request``."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = Field(
        "GET", title="Method", description="GET reads; POST sends data (the usual choice for webhooks)."
    )
    url: str = Field(
        title="Address (URL)",
        description="Where to send the request: an http:// or https:// address.",
        max_length=2048,
    )
    headers: LongText = Field(
        "",
        title="Headers",
        description="Optional, one per line as Name: value — for example Authorization: Bearer abc123",
        max_length=20_000,
    )
    body_type: Literal["none", "json", "text"] = Field(
        "none",
        title="Body",
        description="Send no body, a JSON document, or plain text.",
        json_schema_extra={"x-labels": {"none": "No body", "json": "A JSON document", "text": "Plain text"}},
    )
    body: LongText = Field(
        "", title="Body content", description="The JSON or text to send.", max_length=1_000_000
    )
    timeout: float = Field(
        10.0,
        # At least a tenth of a second: any positive number was taken, down to 1e-320, which no request
        # can meet and a person reads back as "within 9.99989e-321 seconds". At most what an attempt of
        # the type may take (its timeout, 360 s, leaves room to read the answer).
        ge=MIN_TIMEOUT_SECS,
        le=MAX_TIMEOUT_SECS,
        title="Time limit (seconds)",
        description=f"Give up (and try again later) when the whole request takes longer than this: "
        f"from {MIN_TIMEOUT_SECS:g} to {MAX_TIMEOUT_SECS:g} seconds.",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        import httpx  # here: see app.processors.addresses

        value = value.strip()
        try:
            parts = urlsplit(value)
            httpx.URL(value)
        except (ValueError, httpx.InvalidURL):
            raise invalid("is not a valid web address") from None
        if parts.scheme.lower() not in ("http", "https"):
            shown = f"{parts.scheme}://" if parts.scheme else "no scheme"
            raise invalid(f"only http:// and https:// addresses can be requested (this one has {shown})")
        if not parts.hostname:
            raise invalid("names no host, e.g. https://example.com/hook")
        if any(ch.isspace() for ch in value):
            raise invalid("must not contain spaces (encode them as %20)")
        return value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: str) -> str:
        parse_headers(value)
        return value

    @field_validator("body")
    @classmethod
    def _check_body(cls, value: str, info: ValidationInfo) -> str:
        kind = info.data.get("body_type", "none")
        method = info.data.get("method", "GET")
        if kind == "none" and value.strip():
            raise invalid("choose JSON or text as the body kind, or leave the body empty")
        if kind != "none" and method in ("GET", "HEAD"):
            raise invalid(f"a {method} request cannot carry a body here; choose POST, PUT or PATCH")
        if kind == "json":
            try:
                typed_json.parse(value)
            except ValueError as exc:
                raise invalid(f"is not valid JSON: {exc}") from None
        return value


class TemporaryHttpError(RetryableError):
    """A failed attempt worth retrying: 5xx, 408/425/429, timeout, connection failure; with the
    ``retry_after`` a 429 or 503 answer's ``Retry-After`` asked for."""


# --- the processor -----------------------------------------------------------------------------------

resolver_for_jobs: Resolver | None = None
"""The name resolver ``http.request`` jobs use; ``None`` is the system's (:func:`resolve`). Tests set a
fake one to map names to loopback addresses without asking DNS."""


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_MARKUP = re.compile(r"<(script|style|head)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>", re.IGNORECASE | re.DOTALL)


def _answer_words(answer: Answer, text: str) -> str:
    """The answer's body as a failure message shows it: a web page (a server's or a proxy's error page,
    the usual body of a refusal) by its title and visible words, not its markup, which people who are
    not engineers read as a fault of Jobdesk's; any other text as sent."""
    content_type = answer.response.headers.get("content-type", "").split(";")[0].strip().lower()
    start = text.lstrip()[:20].lower()
    if content_type not in ("text/html", "application/xhtml+xml") and not start.startswith(
        ("<!doctype html", "<html")
    ):
        return _snippet(text) or "(empty)"
    title_match = _TITLE.search(text)
    title = _snippet(html.unescape(title_match.group(1)), 100) if title_match else ""
    words = _snippet(html.unescape(_MARKUP.sub(" ", text)))
    if title and words.startswith(title):
        words = words[len(title) :].strip()
    page = f"a web page titled {title!r}" if title else "a web page"
    return f"{page}: {words}" if words else page


def _is_text(content_type: str) -> bool:
    return not content_type or bool(TEXT_TYPES.match(content_type.split(";")[0].strip().lower()))


def _request_parts(inp: HttpRequestInput) -> tuple[dict[str, str], bytes | None]:
    """The headers (with defaults) and body bytes to send."""
    headers = parse_headers(inp.headers)
    names = {k.lower() for k in headers}
    if "user-agent" not in names:
        headers["User-Agent"] = "Jobdesk (http.request)"
    content: bytes | None = None
    if inp.body_type == "json":
        content = json.dumps(typed_json.parse(inp.body)).encode()
        if "content-type" not in names:
            headers["Content-Type"] = "application/json"
    elif inp.body_type == "text":
        content = inp.body.encode()
        if "content-type" not in names:
            headers["Content-Type"] = "text/plain; charset=utf-8"
    return headers, content


@dataclass
class Answer:
    """The response and the first :data:`READ_CAP_BYTES` of its body."""

    response: httpx.Response
    kept: bytes
    size: int
    truncated: bool


async def _exchange(ctx: JobContext[HttpRequestInput], host: str, resolver: Resolver | None) -> Answer:
    """Send the request through a :class:`PinnedTransport` and read at most :data:`READ_CAP_BYTES`.

    Raises:
        PermanentError: a refused address, too many redirects, a redirect to a non-web address.
        TemporaryHttpError: timeout, connection or protocol failure.
    """
    import httpx  # here: see app.processors.addresses

    from app.processors.http_transport import PinnedTransport

    inp = ctx.input
    headers, content = _request_parts(inp)
    kept = bytearray()
    size = 0
    truncated = False
    policy = AddressPolicy(ctx.settings)
    # Before httpx builds the request: it reads the URL's host through strict IDNA and raises on a
    # name such as ``xn--`` (from a ``$ref``), which is refused here in the submission's words.
    problem = policy.check_url(inp.url)
    if problem:
        raise PermanentError(problem)
    transport = PinnedTransport(policy, resolver)
    try:
        async with asyncio.timeout(inp.timeout):
            async with httpx.AsyncClient(
                transport=transport,
                follow_redirects=True,
                max_redirects=MAX_REDIRECTS,
                timeout=httpx.Timeout(inp.timeout),
                trust_env=False,
            ) as client:
                async with client.stream(inp.method, inp.url, headers=headers, content=content) as resp:
                    await ctx.report_progress(0.6, f"{host} answered {resp.status_code}; reading the answer")
                    async for chunk in resp.aiter_bytes():
                        size += len(chunk)
                        kept.extend(chunk[: READ_CAP_BYTES - len(kept)])
                        if size > READ_CAP_BYTES:
                            truncated = True
                            break
    except (TimeoutError, httpx.TimeoutException):
        raise TemporaryHttpError(
            f"No complete answer from {host} within {inp.timeout:g} seconds; it will be tried again."
        ) from None
    except httpx.TooManyRedirects:
        raise PermanentError(f"{host} redirected more than {MAX_REDIRECTS} times; giving up.") from None
    except httpx.UnsupportedProtocol as exc:
        raise PermanentError(f"{host} redirected to an address that is not http or https: {exc}") from None
    except UnicodeError:
        # httpx's IDNA reading of a redirect's host name (the first URL was checked above).
        raise PermanentError(f"{host} redirected to an address whose host name is not valid.") from None
    except httpx.ConnectError as exc:
        raise TemporaryHttpError(f"Could not connect to {host}: {exc or 'connection failed'}") from None
    except httpx.HTTPError as exc:
        raise TemporaryHttpError(f"The request to {host} failed: {exc or type(exc).__name__}") from None
    return Answer(resp, bytes(kept), size, truncated)


def _body_text(answer: Answer) -> str:
    content_type = answer.response.headers.get("content-type", "")
    if not _is_text(content_type):
        return f"({content_type or 'binary'} content, {answer.size} bytes, not shown)"
    text = answer.kept.decode(answer.response.encoding or "utf-8", errors="replace")
    return f"(binary content, {answer.size} bytes, not shown)" if "\x00" in text else text


def _result(inp: HttpRequestInput, answer: Answer, text: str, elapsed_ms: int) -> dict[str, Any]:
    resp = answer.response
    body = text[:BODY_KEEP_CHARS]
    cut = answer.truncated or len(text) > BODY_KEEP_CHARS
    result: dict[str, Any] = {
        "status": resp.status_code,
        "reason": resp.reason_phrase or "",
        "ok": resp.is_success,
        "method": inp.method,
        "url": str(resp.url),
        "elapsed_ms": elapsed_ms,
        "headers": {k: v[:HEADER_VALUE_CAP] for k, v in _joined_headers(resp.headers).items()},
        "content_type": resp.headers.get("content-type", ""),
        "body": body,
        "body_bytes": answer.size,
        "body_truncated": cut,
    }
    if resp.history:
        result["redirected_from"] = [str(r.url) for r in resp.history]
    if cut:
        more = "at least " if answer.truncated else ""
        result["note"] = (
            f"The answer was {more}{answer.size} bytes; only its first {len(body)} characters are kept here."
        )
    return result


def own_address_check(data: dict[str, Any], settings: Any) -> dict[str, str]:
    """At submission: a URL given as text that names one of Jobdesk's own pages is refused at once
    (see :meth:`AddressPolicy.own_page_problem`); a URL from a ``$ref``, a redirect or another name for
    the same server is checked by the transport when the job runs."""
    url = data.get("url")
    if not isinstance(url, str):
        return {}
    problem = AddressPolicy.of(settings).check_url(url.strip())
    return {"url": problem} if problem else {}


@processor(
    "http.request",
    title="Send a web request (webhook)",
    description="Sends one HTTP request to a web address and records the answer. "
    "Server errors and timeouts are tried again; a refusal (4xx) is not.",
    input=HttpRequestInput,
    group="Web and email",
    timeout=360,
    settings_check=own_address_check,
)
async def http_request(ctx: JobContext[HttpRequestInput]) -> dict[str, Any]:
    """Send the request; return ``{status, reason, ok, method, url, elapsed_ms, headers, content_type,
    body, body_bytes, body_truncated, redirected_from?, note?}`` (``body`` is at most
    :data:`BODY_KEEP_CHARS` characters).

    Raises:
        PermanentError: 4xx (but 408/425/429), too many redirects, a redirect to a non-web address, an
            address jobs may not reach.
        TemporaryHttpError: 5xx, 408/425/429, timeout, connection or protocol failure (retried).
    """
    inp = ctx.input
    host = url_host(urlsplit(inp.url).hostname or "") or inp.url
    await ctx.report_progress(0.1, f"Sending {inp.method} to {host}")
    started = time.monotonic()
    answer = await _exchange(ctx, host, resolver_for_jobs)
    elapsed_ms = round((time.monotonic() - started) * 1000)
    text = _body_text(answer)
    status = answer.response.status_code
    said = f"{status} {answer.response.reason_phrase or ''}".strip()
    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        raise PermanentError(
            f"{host} refused the request with {said}. A refusal is not retried: check the address, "
            f"method, headers and body. Answer: {_answer_words(answer, text)}"
        )
    if status >= 500 or status in RETRYABLE_4XX:
        wait = _asked_to_wait(answer.response)
        asked = f" It asked to wait {format_duration(wait)} before trying again." if wait else ""
        raise TemporaryHttpError(
            f"{host} answered {said}; it will be tried again.{asked} Answer: {_answer_words(answer, text)}",
            retry_after=wait,
        )
    result = _result(inp, answer, text, elapsed_ms)
    await ctx.report_progress(1.0, f"{host} answered {said}")
    return result


def _asked_to_wait(response: httpx.Response) -> float | None:
    """Seconds a 429 or 503 answer's ``Retry-After`` asks to wait (the retry waits at least that long,
    within the job type's longest retry delay), or ``None``."""
    if response.status_code not in RETRY_AFTER_STATUSES:
        return None
    return retry_after_secs(response.headers.get("retry-after"), date=response.headers.get("date"))


def _joined_headers(headers: httpx.Headers) -> dict[str, str]:
    """Response headers as one string per name (repeated headers joined with ", ")."""
    out: dict[str, str] = {}
    for name, value in headers.multi_items():
        key = name.title()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out
