"""Operations (cases C15, C17, C18): ``/metrics``, ``/readyz``'s worker check, the plans of
the worker's and the scrape's queries on a seeded table, HOT lease renewals, web connection timeouts, and
the UI answering 503 quickly while processors hold every pooled connection."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app.db import asyncpg_dsn, create_engine
from app.jobs import queue
from app.jobs.queue import NewJob
from app.web import metrics as ops
from tests.support.factories import TestUser
from tests.support.plans import explain
from tests.support.processors import SIDE_EFFECTS_DDL
from tests.support.webkit import add_token, add_user, app_client, login, running_server
from tests.support.workers import running_worker, wait_until

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

TOKEN = "metrics-token-0123456789"


def samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of a Prometheus text exposition."""
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(body_or_samples: Any, name: str, **labels: str) -> float:
    got = samples(body_or_samples) if isinstance(body_or_samples, str) else body_or_samples
    return got.get((name, tuple(sorted(labels.items()))), 0.0)


async def enqueue(
    engine: Any, settings: Any, user: TestUser, type_: str, data: dict[str, Any], **kw: Any
) -> Any:
    async with engine.begin() as conn:
        return (
            await queue.enqueue(conn, NewJob(type=type_, input_data=data, user_id=user.id, **kw), settings)
        ).job["id"]


# --- /metrics -----------------------------------------------------------------------------------------------


async def test_metrics_need_the_token_or_an_admin_session(make_settings: Any, db_url: str) -> None:
    """``/metrics`` answers 401 (with ``WWW-Authenticate``) to anonymous callers and wrong tokens, 403 to
    a signed-in non-admin, and the exposition to the right Bearer token or an admin's session."""
    await add_user(db_url, "ann@example.com")
    await add_user(db_url, "root@example.com", admin=True)
    async with app_client(make_settings(worker_enabled=False, metrics_token=TOKEN)) as c:
        r = await c.get("/metrics")
        assert r.status_code == 401
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert "METRICS_TOKEN" in r.text
        assert (await c.get("/metrics", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}x"})).status_code == 401
        r = await c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "jobdesk_jobs_finished" in r.text
        # an API token of a user is not the metrics token
        api_token = await add_token(db_url, (await add_user(db_url, "bob@example.com", admin=True)).id)
        assert (await c.get("/metrics", headers={"Authorization": f"Bearer {api_token}"})).status_code == 401
        await login(c, "ann@example.com")
        assert (await c.get("/metrics")).status_code == 403
        c.cookies.clear()
        await login(c, "root@example.com")
        r = await c.get("/metrics")
        assert r.status_code == 200
        assert "jobdesk_workers_alive" in r.text
    async with app_client(make_settings(worker_enabled=False)) as c:  # no METRICS_TOKEN: no token works
        assert (await c.get("/metrics", headers={"Authorization": "Bearer "})).status_code == 401


async def test_metrics_report_jobs_workers_counters_and_table_health(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """Jobs by status and type, finished counts, workers alive and listening, this process's counters
    and histograms by type, the jobs table's dead tuples and the oldest open transaction's age."""
    settings = make_settings(worker_enabled=False, metrics_token=TOKEN, worker_heartbeat_secs=0.5)
    later = datetime.now(UTC) + timedelta(hours=1)
    for _ in range(2):
        await enqueue(engine, settings, owner, "sleep", {"seconds": 1}, run_at=later)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with app_client(settings) as c:

        async def scrape() -> dict[Any, float]:
            r = await c.get("/metrics", headers=headers)
            assert r.status_code == 200, r.text
            return samples(r.text)

        before = await scrape()
        assert value(before, "jobdesk_jobs", status="queued", type="sleep") == 2
        assert value(before, "jobdesk_jobs", status="in_progress", type="noop") == 0  # zeros for known types
        assert value(before, "jobdesk_workers_alive") == 0
        async with running_worker(settings):
            for i in range(4):
                await enqueue(engine, settings, owner, "noop", {"i": i})
            await enqueue(engine, settings, owner, "fail", {"times": 1})
            await wait_until(
                lambda: pg.fetchval("SELECT count(*) = 5 FROM jobs WHERE status = 'completed'"),
                what="5 jobs done",
            )

            async def alive() -> bool:
                got = await scrape()
                return (
                    value(got, "jobdesk_workers_alive") == 1 and value(got, "jobdesk_workers_listening") == 1
                )

            await wait_until(alive, timeout=10, what="the worker counted alive and listening")
        after = await scrape()
    assert value(after, "jobdesk_jobs_finished", status="completed", exact="true") == 5
    assert value(after, "jobdesk_jobs_finished", status="failed", exact="true") == 0
    assert value(after, "jobdesk_jobs", status="queued", type="sleep") == 2
    assert value(after, "jobdesk_workers_alive") == 0  # it unregistered when it stopped

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("jobdesk_jobs_claimed_total", type="noop") == 4
    assert delta("jobdesk_jobs_completed_total", type="noop") == 4
    assert delta("jobdesk_jobs_retried_total", type="fail") == 1
    assert delta("jobdesk_jobs_completed_total", type="fail") == 1
    assert delta("jobdesk_job_duration_seconds_count", type="noop") == 4
    assert delta("jobdesk_job_queue_wait_seconds_count", type="fail") == 2
    assert ("jobdesk_listener_connected", ()) in after
    assert ("jobdesk_jobs_table_dead_tuple_ratio", ()) in after


async def test_metrics_show_dead_tuples_and_a_long_open_transaction(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection, db_url: str
) -> None:
    """Case C18: the dead-tuple ratio of ``jobs`` and the age of the oldest open transaction are visible,
    so an operator sees vacuum falling behind and what holds it back."""
    settings = make_settings(worker_enabled=False, metrics_token=TOKEN)
    async with engine.begin() as conn:
        await queue.enqueue_many(
            conn, [NewJob(type="noop", input_data={"i": i}, user_id=owner.id) for i in range(50)], settings
        )
    await pg.execute("UPDATE jobs SET title = 'renamed'")  # 50 dead row versions
    if await pg.fetchval("SELECT current_setting('server_version_num')::int >= 150000"):
        await pg.execute("SELECT pg_stat_force_next_flush()")
    await pg.execute("SELECT 1")
    holder = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        tx = holder.transaction(isolation="repeatable_read")
        await tx.start()
        await holder.fetchval("SELECT count(*) FROM jobs")  # a snapshot that pins the vacuum horizon
        await asyncio.sleep(1.2)
        async with app_client(settings) as c:

            async def figures() -> dict[Any, float]:
                return samples((await c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})).text)

            got = await wait_until(
                lambda: _if(figures(), lambda f: value(f, "jobdesk_jobs_table_dead_tuples") >= 50),
                timeout=15,
                what="dead tuples reported",
            )
            assert 0.3 < value(got, "jobdesk_jobs_table_dead_tuple_ratio") <= 1
            assert value(got, "jobdesk_db_oldest_transaction_seconds") >= 1.0
            await tx.rollback()
            assert value(await figures(), "jobdesk_db_oldest_transaction_seconds") < 1.0
    finally:
        await holder.close()


async def _if(coro: Any, check: Any) -> Any:
    got = await coro
    return got if check(got) else None


# --- /readyz: the in-app worker -----------------------------------------------------------------------------


async def test_readyz_reports_an_in_app_worker_that_stopped_writing_its_heartbeat(make_settings: Any) -> None:
    """``/readyz`` checks the in-app worker is alive, not only that its task exists: a worker whose
    heartbeat is stale (it cannot reach the database) makes the app unready until it writes one again."""
    settings = make_settings(worker_enabled=True, worker_heartbeat_secs=0.5)
    async with app_client(settings) as c:
        worker = c.app.state.worker
        c.blocking_portal.call(worker.wait_started)
        r = await c.get("/readyz")
        assert r.status_code == 200
        assert r.json()["checks"]["worker"] == "ok"

        async def stale() -> bool:
            # The lease keeper's thread writes a heartbeat every 0.5 s; one that lands between setting the
            # last beat back and the request makes it fresh again, so set it back until a request sees it.
            worker.last_beat -= 3600
            r = await c.get("/readyz")
            return r.status_code == 503 and "no heartbeat written for" in r.json()["checks"]["worker"]

        await wait_until(stale, timeout=10, what="/readyz reporting the stale heartbeat")
        await wait_until(lambda: _ready(c), timeout=10, what="the next heartbeat makes it ready again")


async def _ready(c: Any) -> bool:
    return (await c.get("/readyz")).status_code == 200


# --- C17: plans on a seeded table ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def seeded_url(pg_server_url: str, template_db: str) -> Iterator[str]:
    """A migrated database with 100,000 jobs (bench/seed.py: the statuses of a busy installation, with
    their events), vacuumed and analysed."""
    import seed

    from tests import conftest

    name = f"{conftest._PREFIX}_seeded"
    asyncio.run(conftest._create_db(pg_server_url, name, template=template_db))
    url = conftest._db_url(pg_server_url, name)
    asyncio.run(seed.seed(url, 100_000, 5))
    yield url
    asyncio.run(conftest._drop_db(pg_server_url, name))


def seq_scans_of_jobs(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "jobs"]


def indexes_used(nodes: list[dict[str, Any]]) -> set[str]:
    return {n["Index Name"] for n in nodes if "Index Name" in n}


def _plan_cases() -> list[Any]:
    now = datetime.now(UTC)
    ids = [queue.new_id() for _ in range(3)]
    claim = {"worker": "w", "limit": 50, "lease": 300.0, "actor": "worker:w", "types": None, "locked": []}
    by_id = ("pk_jobs", "ix_jobs_status_id", "ix_jobs_running")  # any of these finds rows by id
    return [
        pytest.param(queue.CLAIM, claim, ("ix_jobs_claim",), id="claim"),
        pytest.param(queue.CLAIM_UNLIMITED, claim, ("ix_jobs_claim",), id="claim-unlimited"),
        pytest.param(
            queue.CLAIM, {**claim, "types": ["noop", "sleep"]}, ("ix_jobs_claim",), id="claim-types"
        ),
        pytest.param(queue.CLAIM, {**claim, "locked": ["noop"]}, ("ix_jobs_claim",), id="claim-limited"),
        pytest.param(queue.LOCK_LIMITS, {"types": None}, None, id="lock-limits"),
        pytest.param(queue.HELD_BACK, {"locked": ["noop"]}, None, id="held-back"),
        pytest.param(queue.EXPIRED, {"limit": 500}, ("ix_jobs_running",), id="sweep-expired"),
        pytest.param(queue.RESCUE, {"ids": ids, "delays": [0.0] * 3, "actor": "s"}, by_id, id="sweep-rescue"),
        pytest.param(queue.NEXT_DUE, {}, ("ix_jobs_queued_run_at",), id="next-due"),
        pytest.param(
            queue.RENEW_LEASES,
            {"ids": ids, "claims": [1] * 3, "lease": 300.0, "worker": "w"},
            by_id,
            id="renew",
        ),
        pytest.param(
            queue.CANCEL_REQUESTED, {"ids": ids, "claims": [1] * 3, "worker": "w"}, by_id, id="cancel-check"
        ),
        pytest.param(queue.PRUNE_JOBS, {"days": 30.0, "batch": 500}, ("ix_jobs_finished",), id="retention"),
        pytest.param(ops.LIVE_COUNTS, {}, ("ix_jobs_live",), id="metrics-live"),
        # an index scan that stops at the cap: by status, or newest-first by id when most rows match
        pytest.param(
            ops.CAPPED_COUNT,
            {"status": "completed"},
            ("ix_jobs_status_id", "pk_jobs"),
            id="metrics-completed",
        ),
        pytest.param(
            ops.CAPPED_COUNT, {"status": "failed"}, ("ix_jobs_status_id", "pk_jobs"), id="metrics-failed"
        ),
        pytest.param(queue.STUCK_DEPENDENTS, {}, None, id="stuck-dependents"),
        pytest.param(queue.GET_JOB, {"id": ids[0]}, ("pk_jobs",), id="get-job"),
        pytest.param(
            text("SELECT 1 FROM jobs WHERE run_at > :t"), {"t": now}, None, id="negative-control-unindexed"
        ),
    ]


@pytest.mark.parametrize(("statement", "params", "index"), _plan_cases())
async def test_worker_and_scrape_queries_use_an_index_on_a_seeded_table(
    seeded_url: str,
    statement: Any,
    params: dict[str, Any],
    index: tuple[str, ...] | None,
    request: pytest.FixtureRequest,
) -> None:
    """Case C17: on 100,000 ANALYZEd jobs, the claim (a partial index of due, claimable rows in claim
    order), the rescue sweep, lease renewals, retention and every query a ``/metrics`` scrape runs are
    index scans — none reads the whole ``jobs`` table. The last case is the negative control: a
    predicate no index serves is a sequential scan, and the check says so."""
    conn = await asyncpg.connect(asyncpg_dsn(seeded_url))
    try:
        assert await conn.fetchval("SELECT reltuples >= 100000 FROM pg_class WHERE relname = 'jobs'")
        nodes = await explain(conn, statement, params)
    finally:
        await conn.close()
    if "negative-control" in request.node.callspec.id:
        assert seq_scans_of_jobs(nodes), "a predicate without an index should be a sequential scan"
        return
    assert seq_scans_of_jobs(nodes) == [], json.dumps(nodes, default=str)[:2000]
    if index:
        assert indexes_used(nodes) & set(index), indexes_used(nodes)


async def test_without_its_index_the_claim_would_scan_the_table(seeded_url: str) -> None:
    """Negative control of the claim's index (case C17): with the jobs table's secondary indexes dropped
    (in a transaction that is rolled back), the same claim statement becomes a sequential scan."""
    conn = await asyncpg.connect(asyncpg_dsn(seeded_url))
    try:
        tx = conn.transaction()
        await tx.start()
        try:
            for r in await conn.fetch(
                "SELECT indexrelid::regclass::text AS name FROM pg_index "
                "WHERE indrelid = 'jobs'::regclass AND NOT indisprimary AND NOT indisunique"
            ):
                await conn.execute(f'DROP INDEX "{r["name"]}"')
            nodes = await explain(
                conn,
                queue.CLAIM_UNLIMITED,
                {
                    "worker": "w",
                    "limit": 50,
                    "lease": 300.0,
                    "actor": "worker:w",
                    "types": None,
                    "locked": [],
                },
            )
            assert seq_scans_of_jobs(nodes)
            assert "ix_jobs_claim" not in indexes_used(nodes)
        finally:
            await tx.rollback()
    finally:
        await conn.close()


async def test_seeded_rows_are_valid_jobs_with_their_history(seeded_url: str) -> None:
    """bench/seed.py (used above and by the page benchmarks) writes rows a real installation could have:
    the table's CHECK constraints hold (the insert would fail otherwise), and every job's events end in
    its status."""
    conn = await asyncpg.connect(asyncpg_dsn(seeded_url))
    try:
        counts = dict(await conn.fetch("SELECT status, count(*) FROM jobs GROUP BY status"))
        assert counts["completed"] > counts["failed"] > counts["queued"] > 0
        assert counts["in_progress"] > 0
        wrong = await conn.fetchval(
            """
            SELECT count(*) FROM jobs j
            WHERE (SELECT to_status FROM job_events e WHERE e.job_id = j.id ORDER BY e.id DESC LIMIT 1)
                  IS DISTINCT FROM j.status
            """
        )
        assert wrong == 0
        assert await conn.fetchval("SELECT count(DISTINCT user_id) FROM jobs") == 5
    finally:
        await conn.close()


# --- C18: HOT lease renewals, web connection timeouts -------------------------------------------------------


async def _renewal_hot_fraction(
    engine: Any, pg: asyncpg.Connection, settings: Any, user: TestUser, fillfactor: int | None
) -> float:
    async with engine.begin() as conn:
        await queue.enqueue_many(
            conn, [NewJob(type="noop", input_data={"i": i}, user_id=user.id) for i in range(1000)], settings
        )
    async with engine.begin() as conn:
        held = [r["id"] for r in await queue.claim(conn, "w1", 200, 300)]
    if fillfactor is not None:
        await pg.execute(f"ALTER TABLE jobs SET (fillfactor = {fillfactor})")
    await pg.execute("VACUUM FULL jobs")  # rows packed as the table's fillfactor says
    async with engine.begin() as conn:
        before = (await conn.execute(_XACT_COUNTS)).one()
        report = await queue.heartbeat(conn, "w1", held, 300)
        after = (await conn.execute(_XACT_COUNTS)).one()
    assert len(report.renewed) == 200
    updated, hot = after[0] - before[0], after[1] - before[1]
    assert updated == 200
    return hot / updated


_XACT_COUNTS = text(
    "SELECT pg_stat_get_xact_tuples_updated('jobs'::regclass), pg_stat_get_xact_tuples_hot_updated('jobs'::regclass)"
)


async def test_lease_renewals_are_hot_updates_thanks_to_the_fillfactor(
    engine: Any, pg: asyncpg.Connection, settings: Any, owner: TestUser
) -> None:
    """Case C18: a lease renewal changes only ``lease_expires_at``, which no index covers, and the jobs
    table's fillfactor leaves room on each page, so renewals are HOT updates (no new index entries, no
    index bloat). Negative control: the same renewals on pages packed full (fillfactor 100) are never
    HOT."""
    indexed = await pg.fetch(
        """
        SELECT DISTINCT a.attname FROM pg_index i
        JOIN pg_attribute a ON a.attrelid = i.indrelid
        WHERE i.indrelid = 'jobs'::regclass
          AND (a.attnum = ANY(i.indkey) OR pg_get_expr(i.indpred, i.indrelid) LIKE '%' || a.attname || '%')
        """
    )
    assert "lease_expires_at" not in {r["attname"] for r in indexed}
    fraction = await _renewal_hot_fraction(engine, pg, settings, owner, None)
    assert fraction >= 0.2, f"only {fraction:.0%} of renewals were HOT"
    await pg.execute("TRUNCATE jobs CASCADE")
    packed = await _renewal_hot_fraction(engine, pg, settings, owner, 100)
    assert packed <= 0.02, f"{packed:.0%} HOT on full pages"


async def test_web_connections_carry_statement_and_idle_in_transaction_timeouts(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """Case C18: the web app's connections have ``statement_timeout`` and
    ``idle_in_transaction_session_timeout`` (and no JIT), so a slow page or a request that leaves a
    transaction open cannot pin the vacuum horizon for long: the server ends such a session. Negative
    control: a connection without the setting stays idle in its transaction."""
    settings = make_settings(
        worker_enabled=False, db_statement_timeout_ms=300, db_idle_in_transaction_timeout_ms=600
    )
    async with app_client(settings) as c:
        engine = c.app.state.engine

        async def show() -> dict[str, str]:
            async with engine.connect() as conn:
                return {
                    name: (await conn.execute(text(f"SHOW {name}"))).scalar()
                    for name in ("statement_timeout", "idle_in_transaction_session_timeout", "jit")
                }

        assert c.blocking_portal.call(show) == {
            "statement_timeout": "300ms",
            "idle_in_transaction_session_timeout": "600ms",
            "jit": "off",
        }

        async def slow_statement() -> tuple[str, float]:
            started = time.monotonic()
            async with engine.connect() as conn:
                try:
                    await conn.execute(text("SELECT pg_sleep(3)"))
                except Exception as exc:
                    return str(exc), time.monotonic() - started
            return "finished", time.monotonic() - started

        message, took = c.blocking_portal.call(slow_statement)
        assert "canceling statement due to statement timeout" in message
        assert took < 2

        async def idle_in_transaction() -> tuple[int, str]:
            async with engine.connect() as conn:
                pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar()  # opens a transaction
                await asyncio.sleep(1.5)
                try:
                    await conn.execute(text("SELECT 1"))
                    outcome = "still open"
                except Exception as exc:
                    outcome = str(exc)
                await conn.invalidate()
                return int(pid), outcome

        web_pid, outcome = c.blocking_portal.call(idle_in_transaction)
        assert "idle-in-transaction timeout" in outcome or "connection" in outcome.lower(), outcome
        assert await pg.fetchval("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", web_pid) == 0
    plain = create_engine(db_url, pool_size=1)
    try:
        async with plain.connect() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar()
            await asyncio.sleep(1.5)
            state = await pg.fetchval("SELECT state FROM pg_stat_activity WHERE pid = $1", pid)
            assert state == "idle in transaction"
    finally:
        await plain.dispose()


async def test_a_statement_out_of_time_on_the_bare_connection_answers_503(
    make_settings: Any, db_url: str, pg: asyncpg.Connection
) -> None:
    """The statements that run straight on asyncpg (the token lookup of every API request, the single
    enqueue, a bulk enqueue's COPY) raise the driver's own errors, not SQLAlchemy's: a statement timeout
    there is the database being slow, a 503 with the words a wrapped one gets, not a 500. The token
    lookup is held up by a lock on its table until the statement timeout cancels it."""
    settings = make_settings(worker_enabled=False, db_statement_timeout_ms=300)
    user = await add_user(db_url, "slow-lookup@example.com")
    token = await add_token(db_url, user.id)
    async with app_client(settings) as c:
        async with pg.transaction():
            await pg.execute("LOCK TABLE api_tokens IN ACCESS EXCLUSIVE MODE")
            r = await c.get("/api/me", headers={"Authorization": f"Bearer {token}"})
        assert (r.status_code, r.json()["detail"]) == (
            503,
            "The database took too long to answer. Please try again in a moment.",
        )
        assert r.headers["Retry-After"] == "5"
        assert (await c.get("/api/me", headers={"Authorization": f"Bearer {token}"})).status_code == 200


# --- C15: the UI while processors hold every pooled connection ----------------------------------------------


JOBS = 12


def _serve(db_url: str, data_dir: Path, timeout_secs: float) -> Any:
    return running_server(
        db_url,
        data_dir,
        WORKER_ENABLED="true",
        DB_POOL_SIZE="4",
        DB_POOL_TIMEOUT_SECS=str(timeout_secs),
        MAX_CONCURRENT_JOBS="10",
        WORKER_VISIBILITY_TIMEOUT_SECS="4",
        WORKER_HEARTBEAT_SECS="0.5",
        WORKER_SWEEP_INTERVAL_SECS="0.5",
        JOB_RETRY_INTERVALS="0.1",
        JOB_RETRY_JITTER="0",
        LOG_LEVEL="WARNING",
        JOBDESK_PROCESSOR_MODULES="tests.support.processors",
        PYTHONPATH=str(ROOT),
    )


async def _poll(base: str, token: str, stop: asyncio.Event, tabs: int) -> list[tuple[int, float]]:
    """``tabs`` clients polling the job list every second until ``stop``; ``(status, seconds)`` each."""
    results: list[tuple[int, float]] = []

    async def tab() -> None:
        async with httpx.AsyncClient(
            base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as cl:
            while not stop.is_set():
                started = time.monotonic()
                r = await cl.get("/api/jobs")
                results.append((r.status_code, time.monotonic() - started))
                await asyncio.sleep(1.0)

    await asyncio.gather(*(tab() for _ in range(tabs)))
    return results


@pytest.mark.slow
@pytest.mark.parametrize("pool_timeout", [0.5, 30.0], ids=["timeout-0.5s", "timeout-30s"])
async def test_ui_answers_quickly_while_processors_hold_the_pool_and_every_job_runs_once(
    db_url: str, pg: asyncpg.Connection, engine: Any, make_settings: Any, tmp_path: Path, pool_timeout: float
) -> None:
    """Case C15 (scaled): ``jobdesk serve`` with its in-app worker, pools of 4, 10 concurrent jobs that
    each hold a pooled connection for 2 s, and 5 tabs polling the job list. The in-app worker runs in its
    own thread and event loop with its own processors' pool, so the pages never wait behind processors,
    even with a 30 s pool timeout (before, the processors shared the web's pool, and with that timeout the
    same requests hung for seconds); a request that finds the web pool exhausted gets a 503 within the
    pool timeout. The worker's claims, lease renewals and completions use their own connections, so no
    lease expires and every job completes exactly once."""
    await pg.execute(SIDE_EFFECTS_DDL)
    user = await add_user(db_url, "ops@example.com")
    token = await add_token(db_url, user.id)
    async with engine.begin() as conn:  # waiting before the server (and its worker) starts
        await queue.enqueue_many(
            conn,
            [
                NewJob(type="test.pgsleep", input_data={"seconds": 2}, user_id=user.id, max_attempts=1000)
                for _ in range(JOBS)
            ],
            make_settings(),
        )
    with _serve(db_url, tmp_path / "data", pool_timeout) as base:
        jobs = await pg.fetchval("SELECT count(*) FROM jobs")
        stop = asyncio.Event()
        poller = asyncio.create_task(_poll(base, token, stop, tabs=5))
        try:
            await wait_until(
                lambda: pg.fetchval("SELECT count(*) = $1 FROM jobs WHERE status = 'completed'", jobs),
                timeout=120,
                what="every job completed",
            )
        finally:
            stop.set()
            results = await poller
    statuses = {s for s, _ in results}
    slowest = max(t for _, t in results)
    print(f"\n{len(results)} polls: statuses {sorted(statuses)}, slowest {slowest:.2f} s, jobs {jobs}")
    assert jobs == JOBS
    attempts = await pg.fetchval("SELECT sum(attempts) FROM jobs")
    print(
        f"attempts {attempts} (a processor that cannot get a pooled connection in time fails and is retried)"
    )
    assert statuses <= {200, 503}, statuses
    assert await pg.fetchval("SELECT count(*) FROM side_effects") == jobs
    assert await pg.fetchval("SELECT count(DISTINCT job_id) FROM side_effects") == jobs
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'rescued'") == 0
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'completed'") == jobs
    if pool_timeout < 1:  # processors that find their pool exhausted fail fast and are retried
        assert attempts > jobs, "the processors never ran short of connections: the scenario did not happen"
    assert slowest < 2.0, "the pages waited behind the processors"


# --- the worker's hot path: statements straight on asyncpg --------------------------------------------------


async def test_hot_path_statements_run_on_asyncpg_inside_the_callers_transaction(
    engine: Any, settings: Any, owner: TestUser, pg: asyncpg.Connection
) -> None:
    """The claim and finish statements run straight on the asyncpg connection (for speed) but still in
    the caller's transaction: a claim rolled back with it leaves the job queued, with no event. Negative
    control: in autocommit mode the same claim stands on its own."""
    job = await enqueue(engine, settings, owner, "noop", {})
    async with engine.connect() as conn:
        assert await queue._driver(conn) is not None  # the fast path is in use, not the fallback
        await conn.rollback()
    async with engine.connect() as conn:
        rows = await queue.claim(conn, "w1", 5, 30)
        assert [r["id"] for r in rows] == [job]
        assert isinstance(rows[0], dict)
        await conn.rollback()
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job) == "queued"
    assert await pg.fetchval("SELECT count(*) FROM job_events WHERE kind = 'claimed'") == 0
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        assert [r["id"] for r in await queue.claim(conn, "w1", 5, 30)] == [job]
        await conn.rollback()
    assert await pg.fetchval("SELECT status FROM jobs WHERE id = $1", job) == "in_progress"


def test_fast_json_logs_keep_the_format_and_never_raise() -> None:
    """Log lines rendered by msgspec read as before: one JSON object, keys in order, UUIDs and datetimes
    as strings, unknown objects as their repr, non-ASCII kept; a value msgspec refuses falls back to
    ``json.dumps`` instead of raising in the caller."""
    import io
    import logging
    import uuid

    import structlog

    from app.logs import configure_logging
    from app.settings import load_settings

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        buf = io.StringIO()
        configure_logging(load_settings(log_level="INFO"), stream=buf, json=True)
        log = structlog.get_logger("jobdesk.worker.test")
        jid = uuid.uuid4()
        log.info(
            "job finished", job_id=jid, at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), who="Zoë", o=object()
        )
        log.info("odd", data={(1, 2): "tuple key"})
        first, second = (json.loads(line) for line in buf.getvalue().splitlines())
        assert list(first)[:5] == ["job_id", "at", "who", "o", "event"]
        assert first["job_id"] == str(jid)
        assert first["at"].startswith("2026-01-02T03:04:05")
        assert first["who"] == "Zoë"
        assert first["o"].startswith("<object object")
        assert first["timestamp"].endswith("Z")
        assert len(first["timestamp"]) == len("2026-01-02T03:04:05.123456Z")
        assert second["event"] == "odd"
    finally:
        structlog.reset_defaults()
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.mark.parametrize("fenced", [True, False], ids=["attempt-fence", "negative-control-no-fence"])
async def test_a_stale_attempts_outcome_cannot_finish_a_newer_attempt_of_the_same_worker(
    engine: Any, settings: Any, owner: TestUser, pg: asyncpg.Connection, fenced: bool
) -> None:
    """A worker whose attempt lost its lease (rescued) may claim the same job again. The late outcome of
    the old attempt carries its attempt number and must not complete the new attempt, which is still
    running — the worker id alone cannot tell them apart. Negative control: without the attempt, the
    stale completion wins."""
    job = await enqueue(engine, settings, owner, "noop", {})
    async with engine.begin() as conn:
        assert [r["attempts"] for r in await queue.claim(conn, "w1", 1, 30)] == [1]
    await pg.execute("UPDATE jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", job)
    async with engine.begin() as conn:
        assert [r["id"] for r in await queue.rescue_expired(conn)] == [job]
    async with engine.begin() as conn:
        assert [r["attempts"] for r in await queue.claim(conn, "w1", 1, 30)] == [2]
    stale = queue.Outcome(job, "completed", result='{"from": "attempt 1"}', claim=1 if fenced else None)
    async with engine.begin() as conn:
        report = await queue.finish(conn, "w1", [stale], settings)
    row = await pg.fetchrow("SELECT status, attempts, result_data FROM jobs WHERE id = $1", job)
    if not fenced:
        assert row["status"] == "completed"
        assert report.status == {job: "completed"}
        return
    assert report.lost == {job}
    assert report.status == {}
    assert (row["status"], row["attempts"]) == ("in_progress", 2)  # the new attempt runs on, not cancelled
    failed = queue.Outcome(job, "failed", error="stale failure", claim=1)
    async with engine.begin() as conn:
        assert (await queue.finish(conn, "w1", [failed], settings)).lost == {job}
    current = queue.Outcome(job, "completed", result='{"from": "attempt 2"}', claim=2)
    async with engine.begin() as conn:
        assert (await queue.finish(conn, "w1", [current], settings)).status == {job: "completed"}
    kinds = [r[0] for r in await pg.fetch("SELECT kind FROM job_events WHERE job_id = $1 ORDER BY id", job)]
    assert kinds == ["enqueued", "claimed", "rescued", "claimed", "completed"]
    assert json.loads(await pg.fetchval("SELECT result_data FROM jobs WHERE id = $1", job)) == {
        "from": "attempt 2"
    }


@pytest.mark.slow
async def test_a_standalone_worker_serves_its_own_metrics_when_asked(
    make_settings: Any, engine: Any, owner: TestUser, pg: asyncpg.Connection, tmp_path: Path
) -> None:
    """``WORKER_METRICS_ADDR``: a standalone worker's counters and histograms (which the web app's
    ``/metrics`` cannot see) are served by the worker itself. A malformed address is a settings error."""
    from app.settings import SettingsError, load_settings
    from tests.support.webkit import free_port
    from tests.support.workers import WorkerProcess

    with pytest.raises(SettingsError, match="WORKER_METRICS_ADDR: expected host:port"):
        load_settings(worker_metrics_addr="9108")
    settings = make_settings()
    port = free_port()
    proc = WorkerProcess(settings, tmp_path / "w.log", WORKER_METRICS_ADDR=f"127.0.0.1:{port}")
    try:
        for i in range(3):
            await enqueue(engine, settings, owner, "noop", {"i": i})
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 3 FROM jobs WHERE status = 'completed'"),
            timeout=30,
            what="jobs",
        )

        async def scraped() -> Any:
            try:
                async with httpx.AsyncClient() as client:
                    r = await client.get(f"http://127.0.0.1:{port}/metrics")
            except httpx.TransportError:
                return None
            got = samples(r.text)
            return got if value(got, "jobdesk_jobs_completed_total", type="noop") == 3 else None

        got = await wait_until(scraped, timeout=10, what="the worker's metrics")
        assert value(got, "jobdesk_job_duration_seconds_count", type="noop") == 3
        assert value(got, "jobdesk_listener_connected") == 1
    finally:
        proc.close()
    assert "serving metrics" in (tmp_path / "w.log").read_text()
