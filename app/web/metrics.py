"""``GET /metrics``: Prometheus text format for operators.

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.

Two kinds of series:

* **this process's** counters and histograms from :mod:`app.metrics` (claims, completions, failures,
  retries, rescues, cancels, lost leases; job duration and queue wait by type; the listener gauge), kept by
  the in-app worker — a standalone worker process keeps its own;
* **the whole queue's** gauges, read from the database at scrape time by :func:`database_gauges` with cheap
  queries only: live jobs by status and type from the partial index ``ix_jobs_live``; finished jobs by
  status counted up to :data:`EXACT_CAP` on ``ix_jobs_status_id`` and estimated by the planner above it
  (never ``COUNT(*)`` over the whole table, which would take seconds on millions of rows); workers alive and listening from ``workers``; the
  jobs table's dead-tuple ratio and the age of the oldest open transaction in this database (a
  long one stops vacuum, so dead rows pile up).

Access: ``Authorization: Bearer <METRICS_TOKEN>`` (for the scraper) or a signed-in admin's session; 401
otherwise (403 for a signed-in non-admin), and 400 for more than one ``Authorization`` header
(:func:`app.web.auth_middleware.authorization`).
"""

import hmac
import json
from typing import Any

from litestar import Controller, MediaType, Request, Response, get
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app import __version__
from app.processors import registry
from app.web.auth_middleware import authorization

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LIVE_STATUSES = ("queued", "in_progress", "waiting_approval")
FINISHED_STATUSES = ("completed", "failed", "cancelled")
EXACT_CAP = 10_000
"""Finished jobs of one status are counted exactly up to this many (an index-only scan that stops
there); above it the planner's estimate is reported instead."""
SCRAPE_TIMEOUT_MS = 5_000

LIVE_COUNTS = text(
    """
    SELECT status, type, count(*) AS n FROM jobs
    WHERE status IN ('queued', 'in_progress', 'waiting_approval')
    GROUP BY status, type
    """
)
# ORDER BY the index's own order, so the count is an index-only scan of ix_jobs_status_id that stops at the
# cap, whatever share of the table the status has.
CAPPED_COUNT = text(
    f"SELECT count(*) FROM (SELECT 1 FROM jobs WHERE status = :status ORDER BY id DESC LIMIT {EXACT_CAP}) s"
)
WORKERS = text(
    """
    SELECT count(*) AS alive, count(*) FILTER (WHERE listener_connected) AS listening,
           COALESCE(sum(running), 0) AS running, COALESCE(sum(concurrency), 0) AS slots
    FROM workers WHERE last_seen_at > now() - make_interval(secs => :fresh)
    """
)
TABLE_HEALTH = text(
    """
    SELECT n_live_tup, n_dead_tup,
           EXTRACT(EPOCH FROM now() - GREATEST(last_vacuum, last_autovacuum)) AS since_vacuum
    FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass
    """
)
OLDEST_TRANSACTION = text(
    """
    SELECT COALESCE(EXTRACT(EPOCH FROM max(clock_timestamp() - xact_start)), 0)
    FROM pg_stat_activity
    WHERE datname = current_database() AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
    """
)


async def planner_estimate(conn: Any, status: str) -> float:
    """The planner's row estimate for jobs of a finished ``status`` (no rows read)."""
    assert status in FINISHED_STATUSES  # a fixed word, safe to inline (EXPLAIN takes no parameters)
    plan = (
        await conn.execute(text(f"EXPLAIN (FORMAT JSON) SELECT 1 FROM jobs WHERE status = '{status}'"))
    ).scalar()
    if isinstance(plan, str):
        plan = json.loads(plan)
    return float(plan[0]["Plan"]["Plan Rows"])


async def database_gauges(engine: AsyncEngine, *, worker_fresh_secs: float) -> dict[str, Any]:
    """Read the queue-wide figures (one short read-only transaction, ``statement_timeout`` 5 s).

    Returns ``{"live": [(status, type, n)], "finished": {status: (n, exact)}, "workers": {...},
    "dead_tuples": n, "live_tuples": n, "since_vacuum": seconds or None, "oldest_xact": seconds}``.
    ``worker_fresh_secs``: a worker seen less than this long ago counts as alive.
    """
    async with engine.connect() as conn:
        await conn.execute(text(f"SET LOCAL statement_timeout = {SCRAPE_TIMEOUT_MS}"))
        live = [(r.status, r.type, int(r.n)) for r in (await conn.execute(LIVE_COUNTS)).all()]
        finished: dict[str, tuple[float, bool]] = {}
        for status in FINISHED_STATUSES:
            n = int((await conn.execute(CAPPED_COUNT, {"status": status})).scalar_one())
            finished[status] = (
                (float(n), True) if n < EXACT_CAP else (max(await planner_estimate(conn, status), n), False)
            )
        workers = (await conn.execute(WORKERS, {"fresh": float(worker_fresh_secs)})).mappings().one()
        health = (await conn.execute(TABLE_HEALTH)).mappings().first()
        oldest = float((await conn.execute(OLDEST_TRANSACTION)).scalar_one() or 0)
        await conn.rollback()
    return {
        "live": live,
        "finished": finished,
        "workers": dict(workers),
        "live_tuples": int(health["n_live_tup"]) if health else 0,
        "dead_tuples": int(health["n_dead_tup"]) if health else 0,
        "since_vacuum": float(health["since_vacuum"])
        if health and health["since_vacuum"] is not None
        else None,
        "oldest_xact": oldest,
    }


class _Snapshot(Collector):
    """Gauges built from one :func:`database_gauges` reading."""

    def __init__(self, figures: dict[str, Any], types: list[str]) -> None:
        self.figures = figures
        self.types = types

    def collect(self) -> Any:
        f = self.figures
        info = GaugeMetricFamily("jobdesk_info", "Jobdesk version", labels=["version"])
        info.add_metric([__version__], 1)
        yield info

        live = GaugeMetricFamily(
            "jobdesk_jobs",
            "Jobs waiting, running or waiting for approval, by status and type",
            labels=["status", "type"],
        )
        seen = {(s, t): n for s, t, n in f["live"]}
        for status in LIVE_STATUSES:  # zeros for known types, so a drained queue reads 0, not "absent"
            for job_type in sorted(set(self.types) | {t for s, t in seen if s == status}):
                live.add_metric([status, job_type], seen.get((status, job_type), 0))
        yield live

        finished = GaugeMetricFamily(
            "jobdesk_jobs_finished",
            f"Finished jobs still kept, by status: exact below {EXACT_CAP}, the planner's estimate above",
            labels=["status", "exact"],
        )
        for status, (n, exact) in f["finished"].items():
            finished.add_metric([status, "true" if exact else "false"], n)
        yield finished

        w = f["workers"]
        yield GaugeMetricFamily("jobdesk_workers_alive", "Worker processes seen recently", value=w["alive"])
        yield GaugeMetricFamily(
            "jobdesk_workers_listening", "Live workers whose LISTEN connection is up", value=w["listening"]
        )
        yield GaugeMetricFamily(
            "jobdesk_workers_running_jobs", "Jobs running on live workers", value=w["running"]
        )
        yield GaugeMetricFamily(
            "jobdesk_workers_slots", "Job slots (MAX_CONCURRENT_JOBS) of live workers", value=w["slots"]
        )

        total = f["live_tuples"] + f["dead_tuples"]
        yield GaugeMetricFamily(
            "jobdesk_jobs_table_dead_tuples", "Dead row versions in the jobs table", value=f["dead_tuples"]
        )
        yield GaugeMetricFamily(
            "jobdesk_jobs_table_dead_tuple_ratio",
            "Dead / (live + dead) row versions in the jobs table; high means vacuum is falling behind",
            value=f["dead_tuples"] / total if total else 0.0,
        )
        if f["since_vacuum"] is not None:
            yield GaugeMetricFamily(
                "jobdesk_jobs_table_seconds_since_vacuum",
                "Seconds since the jobs table was last vacuumed",
                value=f["since_vacuum"],
            )
        yield GaugeMetricFamily(
            "jobdesk_db_oldest_transaction_seconds",
            "Age of the oldest open transaction in this database; a long one stops vacuum from cleaning up",
            value=f["oldest_xact"],
        )


def _authorized(request: Request[Any, Any, Any]) -> Response[Any] | None:
    """``None`` when the caller may read metrics, else the plain-text 401/403 to send."""
    token = request.app.state.settings.metrics_token
    header = authorization(request.scope) or ""
    if (
        token
        and header[:7].lower() == "bearer "
        and hmac.compare_digest(header[7:].strip().encode(), token.encode())
    ):
        return None
    user = request.scope.get("user")
    if user is not None and user.is_admin:
        return None
    if user is not None:
        return Response(
            "Only administrators may read /metrics.\n", status_code=403, media_type=MediaType.TEXT
        )
    return Response(
        "Send 'Authorization: Bearer <METRICS_TOKEN>', or sign in as an administrator.\n",
        status_code=401,
        media_type=MediaType.TEXT,
        headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
    )


class MetricsController(Controller):
    """``/metrics`` for Prometheus."""

    tags = ["operations"]
    include_in_schema = False

    @get("/metrics", name="ops.metrics", media_type=CONTENT_TYPE)
    async def metrics(self, request: Request[Any, Any, Any]) -> Response[Any]:
        """The Prometheus exposition (text format 0.0.4); 401/403 without the token or an admin session."""
        denied = _authorized(request)
        if denied is not None:
            return denied
        settings = request.app.state.settings
        figures = await database_gauges(
            request.app.state.engine, worker_fresh_secs=2 * settings.heartbeat_secs + 30
        )
        scrape = CollectorRegistry(auto_describe=False)
        scrape.register(_Snapshot(figures, sorted(registry.names())))
        body = generate_latest(REGISTRY) + generate_latest(scrape)
        return Response(body, media_type=CONTENT_TYPE)
