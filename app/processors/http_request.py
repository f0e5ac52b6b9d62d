"""``http.request``: send one HTTP request — the webhook delivery most background jobs are (issue 9 §2).

Retry rules (issue 9 §2): a 5xx answer, a timeout or a connection failure is a failed attempt, retried
with backoff; a 4xx answer is a permanent failure (the request itself is wrong, sending it again cannot
help) — except 408 Request Timeout, 425 Too Early and 429 Too Many Requests, which say "try again later"
and are retried. Redirects are followed (at most 5, http/https only).

Server-side request forgery: people who may start jobs must not be able to make the worker call
services that only it can reach. So an address that resolves to a loopback, private, link-local or
otherwise non-public IP is refused (permanently, saying why) — checked for the first request and for
every redirect — unless its host is the host of ``JOBDESK_BASE_URL`` or is listed in
``HTTP_REQUEST_ALLOWED_HOSTS``, or ``HTTP_REQUEST_ALLOW_PRIVATE`` is set.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
import time
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import Field, ValidationInfo, field_validator

from app.processors import Input, JobContext, LongText, PermanentError, RetryableError, processor
from app.processors.inputs import invalid

BODY_KEEP_CHARS = 20_000
"""Characters of the answer's body kept in ``result_data``."""
READ_CAP_BYTES = 1024 * 1024
"""Bytes of the answer read at most; the rest is not downloaded."""
HEADER_VALUE_CAP = 2_000
RETRYABLE_4XX = frozenset({408, 425, 429})
MAX_REDIRECTS = 5
TEXT_TYPES = re.compile(r"^(text/|application/([\w.+-]*\+)?(json|xml|javascript|x-www-form-urlencoded)\b)")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def parse_headers(text: str) -> dict[str, str]:
    """``Name: value`` lines → a dict (blank lines ignored).

    Raises:
        pydantic_core.PydanticCustomError: a line without a colon, or a name with characters HTTP does not allow.
    """
    headers: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, sep, value = line.partition(":")
        name = name.strip()
        if not sep or not name:
            raise invalid(f"line {number} is not in the form 'Name: value'")
        if not HEADER_NAME.match(name):
            raise invalid(f"line {number}: {name[:50]!r} is not a valid header name")
        headers[name] = value.strip()
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
        "none", title="Body", description="Send no body, a JSON document, or plain text."
    )
    body: LongText = Field(
        "", title="Body content", description="The JSON or text to send.", max_length=1_000_000
    )
    timeout: float = Field(
        10.0,
        gt=0,
        le=300,
        title="Time limit (seconds)",
        description="Give up (and try again later) when the whole request takes longer than this.",
    )

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        value = value.strip()
        try:
            parts = urlsplit(value)
        except ValueError:
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
                json.loads(value)
            except ValueError as exc:
                raise invalid(f"is not valid JSON: {exc}") from None
        return value


class TemporaryHttpError(RetryableError):
    """A failed attempt worth retrying: 5xx, 408/425/429, timeout, connection failure."""


def _guard(settings: Any) -> Any:
    """An httpx request hook that refuses hosts resolving to non-public addresses (see module doc)."""
    allowed = {h.lower().strip("[]") for h in settings.http_request_allowed_hosts}
    base_host = urlsplit(settings.jobdesk_base_url).hostname
    if base_host:
        allowed.add(base_host.lower())

    async def check(request: httpx.Request) -> None:
        if settings.http_request_allow_private:
            return
        host = (request.url.host or "").lower().strip("[]")
        if host in allowed:
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, request.url.port or 443, type=socket.SOCK_STREAM
            )
        except OSError:
            return  # unresolvable: the connection attempt fails and is retried as a connection error
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not address.is_global:
                raise PermanentError(
                    f"{host} is {address}, a local or private address that jobs may not reach. An admin can allow "
                    "it with HTTP_REQUEST_ALLOWED_HOSTS."
                )

    return check


def _snippet(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def _is_text(content_type: str) -> bool:
    return not content_type or bool(TEXT_TYPES.match(content_type.split(";")[0].strip().lower()))


@processor(
    "http.request",
    title="Send a web request (webhook)",
    description="Sends one HTTP request to a web address and records the answer. "
    "Server errors and timeouts are tried again; a refusal (4xx) is not.",
    input=HttpRequestInput,
    group="Web and email",
    timeout=360,
)
async def http_request(ctx: JobContext[HttpRequestInput]) -> dict[str, Any]:
    """Send the request; return ``{status, reason, ok, method, url, elapsed_ms, headers, content_type,
    body, body_bytes, body_truncated, note?}`` (``body`` is at most :data:`BODY_KEEP_CHARS` characters).

    Raises:
        PermanentError: 4xx (but 408/425/429), too many redirects, a redirect to a non-web address.
        TemporaryHttpError: 5xx, 408/425/429, timeout, connection or protocol failure (retried).
    """
    inp = ctx.input
    host = urlsplit(inp.url).hostname or inp.url
    headers = parse_headers(inp.headers)
    if not any(k.lower() == "user-agent" for k in headers):
        headers["User-Agent"] = "Jobdesk (http.request)"
    content: bytes | None = None
    if inp.body_type == "json":
        content = json.dumps(json.loads(inp.body)).encode()
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
    elif inp.body_type == "text":
        content = inp.body.encode()
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "text/plain; charset=utf-8"

    await ctx.report_progress(0.1, f"Sending {inp.method} to {host}")
    started = time.monotonic()
    kept = bytearray()
    size = 0
    truncated = False
    try:
        async with asyncio.timeout(inp.timeout):
            async with httpx.AsyncClient(
                follow_redirects=True,
                max_redirects=MAX_REDIRECTS,
                timeout=httpx.Timeout(inp.timeout),
                event_hooks={"request": [_guard(ctx.settings)]},
            ) as client:
                async with client.stream(inp.method, inp.url, headers=headers, content=content) as resp:
                    await ctx.report_progress(0.6, f"{host} answered {resp.status_code}; reading the answer")
                    async for chunk in resp.aiter_bytes():
                        size += len(chunk)
                        room = READ_CAP_BYTES - len(kept)
                        kept.extend(chunk[:room])
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
    except httpx.ConnectError as exc:
        raise TemporaryHttpError(f"Could not connect to {host}: {exc or 'connection failed'}") from None
    except httpx.HTTPError as exc:
        raise TemporaryHttpError(f"The request to {host} failed: {exc or type(exc).__name__}") from None
    elapsed_ms = round((time.monotonic() - started) * 1000)

    content_type = resp.headers.get("content-type", "")
    if _is_text(content_type):
        text = bytes(kept).decode(resp.encoding or "utf-8", errors="replace")
        if "\x00" in text:
            text = f"(binary content, {size} bytes, not shown)"
    else:
        text = f"({content_type or 'binary'} content, {size} bytes, not shown)"
    body = text[:BODY_KEEP_CHARS]
    cut = truncated or len(text) > BODY_KEEP_CHARS
    status = resp.status_code
    reason = resp.reason_phrase or ""
    answer = f"{status} {reason}".strip()

    if 400 <= status < 500 and status not in RETRYABLE_4XX:
        raise PermanentError(
            f"{host} refused the request with {answer}. A refusal is not retried: check the address, "
            f"method, headers and body. Answer: {_snippet(text) or '(empty)'}"
        )
    if status >= 500 or status in RETRYABLE_4XX:
        raise TemporaryHttpError(
            f"{host} answered {answer}; it will be tried again. Answer: {_snippet(text) or '(empty)'}"
        )

    result: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "ok": resp.is_success,
        "method": inp.method,
        "url": str(resp.url),
        "elapsed_ms": elapsed_ms,
        "headers": {k: v[:HEADER_VALUE_CAP] for k, v in _joined_headers(resp.headers).items()},
        "content_type": content_type,
        "body": body,
        "body_bytes": size,
        "body_truncated": cut,
    }
    if resp.history:
        result["redirected_from"] = [str(r.url) for r in resp.history]
    if cut:
        more = "at least " if truncated else ""
        result["note"] = (
            f"The answer was {more}{size} bytes; only its first {len(body)} characters are kept here."
        )
    await ctx.report_progress(1.0, f"{host} answered {answer}")
    return result


def _joined_headers(headers: httpx.Headers) -> dict[str, str]:
    """Response headers as one string per name (repeated headers joined with ", ")."""
    out: dict[str, str] = {}
    for name, value in headers.multi_items():
        key = name.title()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out
