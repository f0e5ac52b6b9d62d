"""Two worker "hosts" in network namespaces, one of them cut off from the database while it runs jobs.

The test makes each host with ``ip netns add``, a veth pair and a private /30 (it runs as root; it skips
with the reason where namespaces cannot be made). Each host's worker runs under ``ip netns exec`` and
reaches PostgreSQL — directly, or through PgBouncer in transaction mode — only through TCP proxies
(tests/support/netproxy.py) listening on the host side of its veth. Cutting host A off is ``ip link set
<veth> down``: its packets vanish, as in a real partition, until the link comes back.

A runs four long jobs and two that finish during the cut (their outcome is a late write); B starts idle.
Leases are 3 s. Checked: B rescues every job within the lease plus a minute; A stops its long jobs when
their leases run out by its own clock, before B starts them; A's late outcomes are refused (fencing);
every job completes exactly once (one ``completed`` event; the per-job files of ``test.host_run`` show
what ran where).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from app.jobs import queue
from app.jobs.queue import NewJob
from app.settings import Settings
from tests.support import partition
from tests.support.factories import make_user
from tests.support.netproxy import TcpProxy
from tests.support.workers import ROOT, wait_until, worker_env

pytest_plugins = ("tests.support.pgbouncer",)

LEASE = 3.0
LONG_JOBS = 4
LATE_JOBS = 2


class Host:
    """A network namespace joined to this host by a veth pair on a private /30."""

    def __init__(self, name: str, index: int) -> None:
        tag = f"{os.getpid() % 10000}{name}"
        self.netns = f"jd{tag}"
        self.veth = f"jdh{tag}"
        base = 4 * ((os.getpid() + index) % 60)
        self.outside = f"10.231.{(os.getpid() // 60) % 250}.{base + 1}"
        self.inside = f"10.231.{(os.getpid() // 60) % 250}.{base + 2}"
        self.proxies: list[TcpProxy] = []

    def create(self) -> None:
        inner = f"{self.veth}i"
        for cmd in (
            ["ip", "netns", "add", self.netns],
            ["ip", "link", "add", self.veth, "type", "veth", "peer", "name", inner],
            ["ip", "link", "set", inner, "netns", self.netns],
            ["ip", "addr", "add", f"{self.outside}/30", "dev", self.veth],
            ["ip", "link", "set", self.veth, "up"],
            ["ip", "netns", "exec", self.netns, "ip", "addr", "add", f"{self.inside}/30", "dev", inner],
            ["ip", "netns", "exec", self.netns, "ip", "link", "set", inner, "up"],
            ["ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up"],
        ):
            subprocess.run(cmd, check=True, capture_output=True, timeout=10)

    def proxy(self, host: str, port: int) -> TcpProxy:
        """A proxy on this host's side of the veth, forwarding to ``host:port``."""
        proxy = TcpProxy(host, port, listen_host=self.outside).start()
        self.proxies.append(proxy)
        return proxy

    def link(self, up: bool) -> None:
        subprocess.run(["ip", "link", "set", self.veth, "up" if up else "down"], check=True, timeout=10)

    def destroy(self) -> None:
        for proxy in self.proxies:
            proxy.close()
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=10)


@pytest.fixture
def hosts() -> Iterator[tuple[Host, Host]]:
    made: list[Host] = []
    try:
        for i, name in enumerate("ab"):
            host = Host(name, i)
            made.append(host)
            try:
                host.create()
            except (OSError, subprocess.CalledProcessError) as exc:
                detail = getattr(exc, "stderr", b"") or b""
                pytest.skip(
                    f"cannot create network namespaces here (needs root and `ip netns`): {exc} {detail!r}"
                )
        yield made[0], made[1]
    finally:
        for host in made:
            host.destroy()


class HostWorker:
    """``python worker.py`` run in ``host``'s namespace; output in ``log``."""

    def __init__(self, host: Host, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("ab")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, sys.executable, str(ROOT / "worker.py")],
            env=env,
            cwd=ROOT,
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._out.close()


def _through(host: Host, url: str) -> str:
    """``url`` through a new proxy on ``host``'s side of its veth."""
    target = make_url(url)
    return host.proxy(target.host or "127.0.0.1", target.port or 5432).url(url)


async def _enqueue(engine: Any, settings: Settings, user_id: int) -> tuple[list[Any], list[Any]]:
    long_jobs = [
        NewJob(
            type="test.host_run",
            input_data={"mode": "hold", "seconds": 30.0},
            user_id=user_id,
            max_attempts=10,
        )
        for _ in range(LONG_JOBS)
    ]
    late_jobs = [
        NewJob(type="test.host_run", input_data={"mode": "after_cut"}, user_id=user_id, max_attempts=10)
        for _ in range(LATE_JOBS)
    ]
    async with engine.begin() as conn:
        long_ids = list(await queue.enqueue_many(conn, long_jobs, settings))
        late_ids = list(await queue.enqueue_many(conn, late_jobs, settings))
    return long_ids, late_ids


async def _partition(
    hosts: tuple[Host, Host],
    urls: Callable[[Host], dict[str, str]],
    make_settings: Any,
    engine: Any,
    pg: asyncpg.Connection,
    tmp_path: Path,
    label: str,
) -> None:
    a_host, b_host = hosts
    run_dir = tmp_path / "runs"
    run_dir.mkdir()
    settings = make_settings(
        worker_visibility_timeout_secs=LEASE,
        worker_sweep_interval_secs=0.5,
        max_concurrent_jobs=LONG_JOBS + LATE_JOBS,
        job_cancel_grace_secs=0.5,
    )
    common = {
        partition.RUN_DIR_ENV: str(run_dir),
        "JOBDESK_PROCESSOR_MODULES": "tests.support.processors,tests.support.partition",
    }
    user = await make_user(pg)
    long_ids, late_ids = await _enqueue(engine, settings, user.id)
    a = HostWorker(a_host, worker_env(settings, **common, **urls(a_host)), tmp_path / "a.log")
    b: HostWorker | None = None
    a_id = ""
    try:
        await wait_until(
            lambda: pg.fetchval(
                "SELECT count(*) = $1 FROM jobs WHERE status = 'in_progress' AND locked_by LIKE $2",
                LONG_JOBS + LATE_JOBS,
                f"%-{a.proc.pid}-%",
            ),
            timeout=60,
            what="host A running every job",
        )
        a_id = await pg.fetchval("SELECT locked_by FROM jobs WHERE status = 'in_progress' LIMIT 1")
        b = HostWorker(b_host, worker_env(settings, **common, **urls(b_host)), tmp_path / "b.log")
        await wait_until(
            lambda: pg.fetchval("SELECT count(*) = 2 FROM workers"), timeout=60, what="B started"
        )
        a_host.link(False)
        cut_at = time.time()
        (run_dir / "cut").touch()  # A's "late" jobs finish now, while A is cut off
        try:
            await wait_until(
                lambda: pg.fetchval(
                    "SELECT count(*) = $1 FROM jobs WHERE status = 'completed'", LONG_JOBS + LATE_JOBS
                ),
                timeout=LEASE + 60,
                what="host B completing every job within the lease plus a minute",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{await _scene(pg, a, b)}") from None
        rescued_in = time.time() - cut_at
        a_host.link(True)

        # A, back on the network, tries to record the outcomes of its late jobs: refused (fenced)
        async def refused() -> bool:
            return _count(a, "outcome discarded") >= LATE_JOBS

        await wait_until(refused, timeout=30, what="A's late writes refused")
    finally:
        for w in (a, b):
            if w is not None:
                await asyncio.to_thread(w.stop)
    events = await pg.fetch(
        "SELECT job_id, count(*) FILTER (WHERE kind = 'completed') AS completed, "
        "count(*) FILTER (WHERE kind = 'completed' AND actor = $1) AS by_a FROM job_events GROUP BY job_id",
        f"worker:{a_id}",
    )
    assert len(events) == LONG_JOBS + LATE_JOBS
    assert {r["completed"] for r in events} == {1}, events  # each job completed exactly once
    assert {r["by_a"] for r in events} == {0}, "a write of the cut-off host was accepted"
    for job_id in long_ids:
        runs = partition.runs(job_id, run_dir)
        stopped = [at for event, w, _, at in runs if event == "stopped" and w == a_id]
        started_elsewhere = [at for event, w, _, at in runs if event == "start" and w != a_id]
        assert stopped, f"A did not stop {job_id} when its lease ran out: {runs}"
        assert started_elsewhere, runs
        # A stopped by its own clock before B could start the job (a margin for the file's timing only)
        assert stopped[0] <= min(started_elsewhere) + 0.25, runs
        assert stopped[0] - cut_at <= LEASE + 1.5, f"A stopped {stopped[0] - cut_at:.1f} s after the cut"
        assert [e for e, w, _, _ in runs if e == "done"] == ["done"], runs
    for job_id in late_ids:
        runs = partition.runs(job_id, run_dir)
        assert ("done", a_id) in [(e, w) for e, w, _, _ in runs], runs  # A finished it, too late to count
    assert _count(a, "stopping the job before it can be rescued") >= LONG_JOBS
    print(f"\n{label}: every job of the cut-off host completed elsewhere {rescued_in:.1f} s after the cut")


async def _scene(pg: asyncpg.Connection, *workers: HostWorker | None) -> str:
    """What a failed wait saw: the jobs, the server's sessions and each host's last lines."""
    jobs = await pg.fetch("SELECT id, status, attempts, locked_by, locked_until, now() AS now FROM jobs")
    sessions = await pg.fetch(
        "SELECT pid, application_name, state, wait_event, left(query, 80) AS query, xact_start "
        "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    lines = ["jobs:", *(str(dict(r)) for r in jobs), "sessions:", *(str(dict(r)) for r in sessions)]
    for worker in workers:
        if worker is not None:
            lines += [f"--- {worker.log.name}:", worker.text()[-6000:]]
    return "\n".join(lines)


def _count(worker: HostWorker, text: str) -> int:
    return worker.text().count(text)


async def test_a_host_cut_off_mid_job_is_rescued_fenced_and_completes_each_job_once(
    hosts: tuple[Host, Host],
    make_settings: Any,
    engine: Any,
    pg: asyncpg.Connection,
    db_url: str,
    tmp_path: Path,
) -> None:
    """Both hosts reach PostgreSQL directly (through their proxy)."""
    await _partition(
        hosts,
        lambda host: {"DATABASE_URL": _through(host, db_url)},
        make_settings,
        engine,
        pg,
        tmp_path,
        "direct",
    )


async def test_a_host_cut_off_behind_pgbouncer_in_transaction_mode(
    hosts: tuple[Host, Host],
    make_settings: Any,
    engine: Any,
    pg: asyncpg.Connection,
    db_url: str,
    tmp_path: Path,
    pgbouncer: Any,
) -> None:
    """Both hosts reach PgBouncer (transaction mode, stock settings) through their proxy; LISTEN goes to
    PostgreSQL directly, through a second proxy of the same host (cut with it)."""
    bouncer = pgbouncer("transaction")
    database = make_url(db_url).database

    def urls(host: Host) -> dict[str, str]:
        return {
            "DATABASE_URL": _through(host, bouncer.url(database)),
            "DATABASE_POOLER": "transaction",
            "DATABASE_LISTEN_URL": _through(host, db_url),
        }

    await _partition(hosts, urls, make_settings, engine, pg, tmp_path, "PgBouncer")
