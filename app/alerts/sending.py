"""One request to one channel, and what its answer means.

Each request is bounded by :data:`SEND_TIMEOUT_SECS` however the server behaves. A channel that answers
429, 408, 5xx or not at all may be retried later, with exponential backoff and jitter
(:func:`backoff_secs`, ``Retry-After`` honoured); any other 4xx answer is final. Nothing here touches
the database or raises for what the network or the server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.alerts.channels import Channel
from app.alerts.messages import one_line
from app.jobs.backoff import retry_after_secs

if TYPE_CHECKING:
    import httpx

SEND_TIMEOUT_SECS = 10.0
"""Hard limit on one request to one channel, however the server behaves (a slow drip included)."""
BACKOFF_BASE_SECS = 2.0
"""Wait before the 2nd round; it doubles each round, with jitter, up to :data:`BACKOFF_CAP_SECS`."""
BACKOFF_CAP_SECS = 300.0
MAX_RETRY_AFTER_SECS = 3600.0
"""A channel's ``Retry-After`` is honoured up to this many seconds."""


@dataclass
class Attempt:
    """The outcome of one request to one channel. ``retryable``: 429, 408, 5xx, a timeout or a network
    error; ``retry_after``: seconds the channel asked us to wait (``Retry-After``, or Telegram's
    ``parameters.retry_after``)."""

    channel: str
    ok: bool
    status_code: int | None = None
    error: str | None = None
    retryable: bool = False
    retry_after: float | None = None


def _retry_after(response: httpx.Response) -> float | None:
    seconds = retry_after_secs(response.headers.get("retry-after"), date=response.headers.get("date"))
    if seconds is None:  # Telegram says it in the body; any other body (or none) is no answer
        with contextlib.suppress(ValueError, LookupError, AttributeError, TypeError):
            seconds = float(response.json()["parameters"]["retry_after"])
    if seconds is None:
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_SECS)


def judge(channel: Channel, response: httpx.Response) -> Attempt:
    """What ``channel``'s answer means: taken (2xx, unless the body says ``"ok": false`` as Telegram's
    does), worth retrying (429, 408, 5xx) or refused for good (any other answer). The error text never
    contains the channel's secrets."""
    code = response.status_code
    detail = ""
    with contextlib.suppress(Exception):
        detail = response.text[:300]
    with contextlib.suppress(Exception):
        data = response.json()
        if isinstance(data, dict) and data.get("description"):
            detail = str(data["description"])[:300]
        if 200 <= code < 300 and isinstance(data, dict) and data.get("ok") is False:
            return Attempt(channel.name, False, code, channel.redact(f"refused: {detail}"))
    if 200 <= code < 300:
        return Attempt(channel.name, True, code)
    error = channel.redact(f"HTTP {code}" + (f": {one_line(detail, 300)}" if detail.strip() else ""))
    if code == 429 or code == 408 or code >= 500:
        return Attempt(channel.name, False, code, error, retryable=True, retry_after=_retry_after(response))
    return Attempt(channel.name, False, code, error)


async def send(
    client: httpx.AsyncClient, channel: Channel, body: dict[str, Any], limit_secs: float = SEND_TIMEOUT_SECS
) -> Attempt:
    """POST ``body`` as JSON to ``channel``; never raises for anything the network or the server does.

    Bounded by ``limit_secs`` seconds in all (on top of httpx's per-phase timeouts), so a channel that
    hangs, drips or black-holes costs this coroutine at most that long — and nothing else any time.
    """
    import httpx  # loaded already by whoever made ``client``; see app.alerts.delivery.new_client

    try:
        async with asyncio.timeout(limit_secs):
            response = await client.post(channel.url, json=body)
    except (TimeoutError, httpx.TimeoutException):
        return Attempt(channel.name, False, None, f"no answer within {limit_secs:g} s", retryable=True)
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return Attempt(channel.name, False, None, channel.redact(one_line(reason, 300)), retryable=True)
    return judge(channel, response)


def backoff_secs(
    attempts: int, retry_after: float | None = None, *, rng: random.Random | None = None
) -> float:
    """Seconds before delivery round ``attempts + 1``: ``BACKOFF_BASE_SECS · 2^(attempts-1)`` capped at
    :data:`BACKOFF_CAP_SECS`, then jittered into [50 %, 100 %] of that; never less than ``retry_after``."""
    jitter = rng.random() if rng is not None else random.random()
    exp = min(max(attempts - 1, 0), 30)
    delay = min(BACKOFF_CAP_SECS, BACKOFF_BASE_SECS * (2**exp))
    delay *= 0.5 + jitter * 0.5
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay
