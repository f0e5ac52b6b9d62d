"""Callbacks: when a job that was submitted with a ``callback_url`` ends (completed, failed or
cancelled), Jobdesk POSTs the job's JSON there, signed with ``X-Jobdesk-Signature: sha256=<hex HMAC-SHA256
of the body>`` keyed by ``CALLBACK_SIGNING_SECRET``.

The URL is checked when the job is submitted (http or https, a host, no credentials) and again at each
attempt under the same address rules as ``http.request`` jobs (:class:`AddressPolicy`): a loopback or
private address is refused unless ``HTTP_REQUEST_ALLOWED_HOSTS`` allows it, and the address is resolved
once and pinned for the connection; at Jobdesk's own address only its JSON API (``/api/…``) may be
called, never a page or form. A 2xx answer delivers it; a 5xx, 408, 429, a timeout or no connection
is tried again after ``CALLBACK_RETRY_INTERVALS`` (at least as long as a 429 or 503 answer's
``Retry-After`` asks, up to the longest interval); a refused address or another 4xx is given up at once.

Delivery runs in each worker's sweep task (:class:`CallbackSender`), off the job path: due rows are
claimed with ``FOR UPDATE SKIP LOCKED`` and leased by pushing ``next_at`` ahead, and no transaction is
open while the receiver answers. A callback is delivered at least once; receivers can tell repeats by
the job's ``id`` and ``X-Jobdesk-Delivery``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.errors import BadInput
from app.jobs.backoff import RETRY_AFTER_STATUSES, at_least, retry_after_secs
from app.jobs.error_text import error_text_for
from app.jobs.payload import cap_text, json_text, text_problem
from app.jobs.permanence import failed_permanently, permanent_among
from app.processors import PermanentError
from app.processors.addresses import AddressPolicy
from app.settings import Settings
from app.silence import answered_within, warn_on_close

MAX_URL_CHARS = 2000
SEND_TIMEOUT_SECS = 10.0
LEASE_SECS = 60.0
PER_ROUND = 20
FINISHED = ("completed", "failed", "cancelled")
BODY_FIELDS = (
    "id type title status input_data result_data error_message attempts max_attempts priority run_at "
    "pipeline_id step_key progress progress_message idempotency_key user_id created_at updated_at "
    "started_at completed_at"
).split()


def check_url(url: Any, settings: Settings, field: str = "callback_url") -> str:
    """``url`` if it can be a callback target.

    Raises:
        BadInput: callbacks are not set up, or the URL is empty, is not an http(s) URL with a host, carries
            credentials, is too long, or names a local or private address (literal) that is not allowed.
    """
    if not settings.callback_signing_secret:
        raise BadInput.field(field, "callbacks are not set up here: an admin sets CALLBACK_SIGNING_SECRET")
    if isinstance(url, str) and not url.strip():
        # said apart: "of at most N characters" would read as if an empty URL were too long
        raise BadInput.field(field, f"is empty: give an http or https URL, or leave {field} out")
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS or text_problem(url):
        raise BadInput.field(field, f"give an http or https URL of at most {MAX_URL_CHARS:,} characters")
    if any(ch.isspace() for ch in url.strip()):
        # As an http.request's URL is refused: a space in the host (``https://exa mple.com/``) was taken
        # and the callback retried for hours against a name no lookup can find, then given up.
        raise BadInput.field(field, "must not contain spaces (encode them as %20)")
    import httpx  # here: every worker imports this module for its sweep (see app.processors.addresses)

    try:
        parsed = httpx.URL(url.strip())
    except httpx.InvalidURL:
        raise BadInput.field(field, "is not a valid URL") from None
    # ``raw_host``, not ``host``, which raises on a malformed IDNA name (``xn--``): the address check
    # below refuses such a name in words.
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise BadInput.field(field, "give an http or https URL with a host name")
    if parsed.userinfo:
        raise BadInput.field(field, "may not carry a user name or password")
    # Jobdesk's own pages, and an address literal that jobs may not reach; a name's addresses are
    # checked when it is resolved, at each attempt.
    problem = AddressPolicy.of(settings).check_url(url.strip())
    if problem:
        raise BadInput.field(field, problem)
    return url.strip()


ADD = text("INSERT INTO job_callbacks (job_id, url) VALUES (:job_id, :url) ON CONFLICT (job_id) DO NOTHING")


async def add(db: AsyncConnection | AsyncSession, job_id: uuid.UUID, url: str) -> None:
    """Ask for a callback when ``job_id`` ends (in the submit's transaction)."""
    await db.execute(ADD, {"job_id": job_id, "url": url})


def _seconds(secs: float) -> str:
    return f"{secs:g} second{'' if secs == 1 else 's'}"


def sign(body: bytes, secret: str) -> str:
    """The ``X-Jobdesk-Signature`` header's value for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def body_of(job: Mapping[Any, Any], tags: Sequence[str], permanent: set[str] | None = None) -> bytes:
    """The POSTed JSON: the job as ``GET /api/jobs/{id}`` shows it to its owner, with its tags and
    ``failed_permanently`` (``permanent``: :func:`app.jobs.permanence.permanent_among`)."""
    data = {k: job.get(k) for k in BODY_FIELDS}
    data["failed_permanently"] = failed_permanently(job, permanent or set())
    data["error_message"] = error_text_for(job.get("error_message"), None)
    data["tags"] = list(tags)
    return json_text(data).encode()


CLAIM = text(
    f"""
    WITH due AS (
        SELECT c.job_id FROM job_callbacks c JOIN jobs j ON j.id = c.job_id
        WHERE c.delivered_at IS NULL AND c.given_up_at IS NULL AND c.next_at <= now()
          AND j.status IN {FINISHED}
        ORDER BY c.next_at LIMIT {PER_ROUND}
        FOR UPDATE OF c SKIP LOCKED
    )
    UPDATE job_callbacks c SET next_at = now() + make_interval(secs => {LEASE_SECS}), attempts = c.attempts + 1
    FROM due WHERE c.job_id = due.job_id
    RETURNING c.job_id, c.url, c.attempts
    """
)
JOBS = text("SELECT * FROM jobs WHERE id = ANY(CAST(:ids AS uuid[]))")
TAGS = text("SELECT job_id, tag FROM job_tags WHERE job_id = ANY(CAST(:ids AS uuid[])) ORDER BY tag")
DELIVERED = text("UPDATE job_callbacks SET delivered_at = now(), last_error = NULL WHERE job_id = :job_id")
RETRY = text(
    "UPDATE job_callbacks SET next_at = now() + make_interval(secs => :delay), last_error = :error "
    "WHERE job_id = :job_id"
)
GIVE_UP = text("UPDATE job_callbacks SET given_up_at = now(), last_error = :error WHERE job_id = :job_id")


@dataclass
class Attempt:
    """One delivery's outcome; ``retry_after``: seconds a 429 or 503 answer's ``Retry-After`` asked for."""

    job_id: uuid.UUID
    ok: bool
    retry: bool
    error: str | None = None
    retry_after: float | None = None


class CallbackSender:
    """One worker's callback delivery; :meth:`run_once` is one round (tests call it directly)."""

    def __init__(
        self,
        engine: AsyncEngine,
        settings: Settings,
        *,
        log: Any,
        transport: Any = None,
        answer_secs: float | None = None,
    ) -> None:
        self.engine = engine
        self.settings = settings
        self.log = log
        self.transport = transport
        self.answer_secs = answer_secs
        """How long each of its transactions may wait for the database, its commit included (the sweep
        gives a heartbeat, as to its other parts): on a connection gone silent behind a proxy or pooler
        that keeps TCP alive, the claim or the record would otherwise wait for ever, and every callback
        of this worker behind it. ``None``: no bound."""

    def _transaction(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A transaction closed as a lost connection (:func:`app.silence.answered_within`) unless it is
        over within :attr:`answer_secs`."""
        return answered_within(
            self.engine.begin(), self.answer_secs, warn_on_close(self.log, "callbacks", self.answer_secs)
        )

    async def run_once(self) -> int:
        """Claim due callbacks, send them (no transaction open), record the outcomes; returns how many
        were sent."""
        secret = self.settings.callback_signing_secret
        if not secret:
            return 0
        async with self._transaction() as conn:
            claimed = (await conn.execute(CLAIM)).mappings().all()
            if not claimed:
                return 0
            ids = [c["job_id"] for c in claimed]
            jobs = {r["id"]: r for r in (await conn.execute(JOBS, {"ids": ids})).mappings().all()}
            tags: dict[uuid.UUID, list[str]] = {}
            for r in (await conn.execute(TAGS, {"ids": ids})).mappings().all():
                tags.setdefault(r["job_id"], []).append(r["tag"])
            permanent = await permanent_among(conn, [i for i, j in jobs.items() if j["status"] == "failed"])
        attempts = await asyncio.gather(
            *(
                self._send(c, jobs[c["job_id"]], tags.get(c["job_id"], []), secret, permanent)
                for c in claimed
                if c["job_id"] in jobs
            )
        )
        async with self._transaction() as conn:
            for c, a in zip(claimed, attempts, strict=False):
                await self._record(conn, a, c["attempts"])
        return len(attempts)

    async def _send(
        self,
        claimed: Mapping[Any, Any],
        job: Mapping[Any, Any],
        tags: list[str],
        secret: str,
        permanent: set[str] | None = None,
    ) -> Attempt:
        body = body_of(job, tags, permanent)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "Jobdesk-callback",
            "X-Jobdesk-Signature": sign(body, secret),
            "X-Jobdesk-Delivery": f"{job['id']}:{claimed['attempts']}",
        }
        import httpx

        from app.processors.http_transport import PinnedTransport

        transport = self.transport or PinnedTransport(AddressPolicy(self.settings))
        job_id = claimed["job_id"]
        try:
            # One deadline for the whole exchange, and the answer's body is never read: httpx's timeout
            # bounds each read, not the exchange, so a receiver dripping its answer (or sending a body
            # without end) would hold this round, and every callback waiting behind it, for as long as
            # it liked. Only the status decides the outcome.
            async with (
                asyncio.timeout(SEND_TIMEOUT_SECS),
                httpx.AsyncClient(transport=transport, timeout=SEND_TIMEOUT_SECS, trust_env=False) as client,
                client.stream("POST", claimed["url"], content=body, headers=headers) as resp,
            ):
                status = resp.status_code
                wait = (
                    retry_after_secs(resp.headers.get("retry-after"), date=resp.headers.get("date"))
                    if status in RETRY_AFTER_STATUSES
                    else None
                )
        except PermanentError as exc:
            return Attempt(job_id, ok=False, retry=False, error=str(exc))
        except TimeoutError:  # before OSError, of which it is a kind
            return Attempt(
                job_id, ok=False, retry=True, error=f"no answer within {_seconds(SEND_TIMEOUT_SECS)}"
            )
        except (httpx.HTTPError, OSError) as exc:
            return Attempt(job_id, ok=False, retry=True, error=f"no answer: {exc or type(exc).__name__}")
        if 200 <= status < 300:
            return Attempt(job_id, ok=True, retry=False)
        retry = status >= 500 or status in (408, 425, 429)
        return Attempt(job_id, ok=False, retry=retry, error=f"answered {status}", retry_after=wait)

    async def _record(self, conn: AsyncConnection, a: Attempt, attempts: int) -> None:
        if a.ok:
            await conn.execute(DELIVERED, {"job_id": a.job_id})
            return
        intervals = self.settings.callback_retry_intervals
        error = cap_text(a.error, 2000)
        if a.retry and attempts <= len(intervals):
            # a receiver's Retry-After is waited out, up to the longest interval
            delay = at_least(intervals[attempts - 1], a.retry_after, max(intervals))
            await conn.execute(RETRY, {"job_id": a.job_id, "delay": delay, "error": error})
            self.log.info("callback failed; will retry", job_id=str(a.job_id), error=a.error)
        else:
            await conn.execute(GIVE_UP, {"job_id": a.job_id, "error": error})
            self.log.warning("callback given up", job_id=str(a.job_id), error=a.error, attempts=attempts)
