"""Server start-up: database checks, migrations, the in-app worker's lifecycle."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from app import server
from app.db import head_revision
from app.server import StartupRefused, create_app
from tests.support.webkit import app_client


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
    assert message.startswith("Refusing to start:")
    assert "run `jobdesk migrate`" in message


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
        assert r.status_code == 200
        assert r.json()["checks"]["worker"] == "ok"
        # a worker that dies makes the app unready
        worker.finished = True
        r = await c.get("/readyz")
        assert r.status_code == 503
        assert "worker: the in-app worker has stopped" in r.json()["detail"]
        worker.finished = False
    assert worker.stopped
    assert worker.finished


async def test_worker_disabled_starts_no_worker(
    make_settings: Any, fake_worker_module: type[FakeWorker]
) -> None:
    async with app_client(make_settings(worker_enabled=False)) as c:
        assert c.app.state.worker is None
        assert "worker" not in (await c.get("/readyz")).json()["checks"]
    assert fake_worker_module.instances == []


async def test_an_app_started_again_on_other_settings_serves_only_their_database(
    make_settings: Any, db_url: str, recycled_databases: Any, pg_server_url: str
) -> None:
    """An app reads its settings when it starts (``rebind``): started again on a second database, every
    read — the token check and a handler's own session alike — goes to that one, none to the first."""
    from sqlalchemy.engine import make_url

    from app.server import rebind
    from tests.support.webkit import bearer

    second = await recycled_databases.take()
    second_url = make_url(pg_server_url).set(database=second).render_as_string(hide_password=False)
    try:
        app = create_app(make_settings(worker_enabled=False))
        _, first_auth = await bearer(db_url, "first@example.com", admin=True)
        from litestar.testing import AsyncTestClient

        async with AsyncTestClient(app=app) as c:
            r = await c.post(
                "/api/jobs", json={"type": "noop", "input_data": {"text": "a"}}, headers=first_auth
            )
            assert r.status_code == 201, r.text
        _, second_auth = await bearer(second_url, "second@example.com", admin=True)
        rebind(app, make_settings(worker_enabled=False, database_url=second_url))
        async with AsyncTestClient(app=app) as c:
            r = await c.post(
                "/api/jobs", json={"type": "noop", "input_data": {"text": "b"}}, headers=second_auth
            )
            assert r.status_code == 201, r.text
            listed = (await c.get("/api/jobs", headers=second_auth)).json()
            assert [job["id"] for job in listed["items"]] == [r.json()["id"]]
            assert (await c.get("/api/jobs", headers=first_auth)).status_code == 401
    finally:
        await recycled_databases.give_back(second)
