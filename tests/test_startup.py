"""Server start-up: database checks, migrations, the in-app worker's lifecycle."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from webkit import app_client

from app import server
from app.db import head_revision
from app.server import StartupRefused, create_app


async def _startup_error(app: Any) -> BaseException:
    """The exception the app's start-up (what the ASGI server runs) fails with, unwrapped from the
    exception group Litestar's event emitter puts around it."""
    try:
        async with app.lifespan():
            pass
    except BaseException as exc:
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        return exc
    raise AssertionError("the app started")


async def test_refuses_to_start_when_migrations_are_behind(make_settings: Any, fresh_db_url: str) -> None:
    app = create_app(make_settings(database_url=fresh_db_url, worker_enabled=False))
    error = await _startup_error(app)
    assert isinstance(error, StartupRefused)
    message = str(error)
    assert message.startswith("Refusing to start:") and "run `jobdesk migrate`" in message


async def test_auto_migrate_applies_pending_migrations(make_settings: Any, fresh_db_url: str) -> None:
    settings = make_settings(database_url=fresh_db_url, worker_enabled=False)
    async with app_client(settings, auto_migrate=True) as c:
        r = await c.get("/readyz")
        assert r.status_code == 200
        assert c.app.state.head_revision == head_revision()


async def test_unreachable_database_stops_start_up_with_a_clear_message(make_settings: Any) -> None:
    from app.db import DatabaseUnavailable

    app = create_app(
        make_settings(database_url="postgresql://nobody@127.0.0.1:9/nowhere", worker_enabled=False)
    )
    error = await _startup_error(app)
    assert isinstance(error, DatabaseUnavailable)
    assert re.match(
        r"Cannot reach the database at .*127\.0\.0\.1:9/nowhere: .*Connect call failed", str(error)
    )


class FakeWorker:
    """Stands in for the in-app worker's thread handle (app.worker.threaded) to check the lifespan's
    wiring: started with the app's settings and database, stopped (and waited for) at shutdown."""

    instances: list[FakeWorker] = []

    def __init__(self, settings: Any, database_url: str) -> None:
        self.settings, self.database_url = settings, database_url
        self.worker = self
        self.running = True
        self.stopped = False
        self.finished = False
        FakeWorker.instances.append(self)

    def health(self) -> str | None:
        return None

    def done(self) -> bool:
        return self.finished

    async def stop_async(self) -> bool:
        self.stopped = self.finished = True
        return True


@pytest.fixture
def fake_worker_module(monkeypatch: pytest.MonkeyPatch) -> type[FakeWorker]:
    monkeypatch.setattr(server, "start_in_thread", FakeWorker)
    FakeWorker.instances = []
    return FakeWorker


async def test_in_app_worker_is_started_and_stopped_with_the_app(
    make_settings: Any, fake_worker_module: type[FakeWorker]
) -> None:
    settings = make_settings(worker_enabled=True)
    async with app_client(settings) as c:
        await asyncio.sleep(0)
        (worker,) = fake_worker_module.instances
        assert worker.settings is settings
        assert worker.database_url == settings.database_url
        assert c.app.state.worker is worker
        r = await c.get("/readyz")
        assert r.status_code == 200 and r.json()["checks"]["worker"] == "ok"
        # a worker that dies makes the app unready
        worker.finished = True
        r = await c.get("/readyz")
        assert r.status_code == 503 and "worker: the in-app worker has stopped" in r.json()["detail"]
        worker.finished = False
    assert worker.stopped and worker.finished


async def test_worker_disabled_starts_no_worker(
    make_settings: Any, fake_worker_module: type[FakeWorker]
) -> None:
    async with app_client(make_settings(worker_enabled=False)) as c:
        assert c.app.state.worker is None
        assert "worker" not in (await c.get("/readyz")).json()["checks"]
    assert fake_worker_module.instances == []
