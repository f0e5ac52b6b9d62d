"""Settings read from the environment.

Every variable is documented in README.md's configuration table; a test checks that the table and
:class:`Settings` agree. Names such as ``JOB_PROCESSOR_POLL_INTERVAL``, ``MAX_CONCURRENT_JOBS``,
``JOB_RETRY_INTERVALS``, ``DB_POOL_SIZE``, ``WORKER_VISIBILITY_TIMEOUT_SECS`` and ``JOB_WORKER_LOG_LEVEL``
are the ones deployments already set, so they stay. A bad value stops start-up with
:class:`SettingsError`, whose message names the variable and what it expects.
"""

from __future__ import annotations

import functools
import os
import secrets
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from app.digits import whole

KIB = 1024
MIB = 1024 * 1024

ALERT_KINDS = ("failed", "pipeline_failed", "approval_needed", "admin_action")


class SettingsError(Exception):
    """A configuration value is missing or malformed; the message is meant for a person."""


def _csv_floats(value: Any) -> Any:
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not parts:
            raise ValueError("expected comma-separated seconds, e.g. 10,30,60")
        try:
            return [float(p) for p in parts]
        except ValueError:
            raise ValueError(f"expected comma-separated seconds, e.g. 10,30,60; got {value!r}") from None
    return value


def _csv_words(value: Any) -> Any:
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return value


def allowed_host(entry: str) -> tuple[str, int | None]:
    """An ``HTTP_REQUEST_ALLOWED_HOSTS`` entry as ``(host, port or None for any port)``, lower-cased: a
    name, ``name:port``, ``[IPv6]`` or ``[IPv6]:port``. Raises ValueError, saying which entry, for a port
    that is not a number from 1 to 65535: the settings are refused at start, not each job's check."""
    entry = entry.strip().lower()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else rest
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        host, port = entry, ""
    host = host.rstrip(".")  # a name with a final dot is the same name
    if not port:
        return host, None
    number = whole(port)
    if number is None or not 0 < number < 65536:
        raise ValueError(f"{entry[:80]!r}: the port after the host must be a number from 1 to 65535")
    return host, number


class Settings(BaseSettings):
    """All of Jobdesk's configuration; one instance per process (:func:`get_settings`)."""

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore", frozen=True)

    # --- database -------------------------------------------------------------------------------
    database_url: str | None = None
    """``postgresql://`` or ``postgresql+asyncpg://`` URL. Unset: an embedded PostgreSQL under
    ``JOBDESK_DATA_DIR/pgdata`` is started, so a first run needs no database server."""
    database_listen_url: str | None = None
    """Where the worker's LISTEN connection goes, if not ``DATABASE_URL`` — e.g. the server itself when
    ``DATABASE_URL`` points at PgBouncer in transaction mode, which cannot LISTEN."""
    database_migrate_url: str | None = None
    """Where ``jobdesk migrate`` (and ``serve``'s migration at start-up) connects, if not ``DATABASE_URL``
    — the server itself when ``DATABASE_URL`` points at a connection pooler."""
    database_pooler: Literal["none", "transaction", "session"] = "none"
    """What ``DATABASE_URL`` points at: ``none`` (PostgreSQL itself: settings sent at connect, prepared
    statements cached), or PgBouncer's pool mode, ``transaction`` or ``session`` (see :mod:`app.pooler`)."""
    db_pool_size: int = Field(20, ge=1, le=1000)
    """Connections in the web/processor pool. The worker's own claim, lease and listen connections are
    separate and never taken by processors, so a pool smaller than the worker's concurrency cannot stop
    jobs from being claimed or finished."""
    db_pool_timeout_secs: float = Field(5.0, gt=0, le=300)
    """How long a request waits for a pooled connection before it gets a 503 (rather than hanging while
    processors hold every connection)."""
    db_statement_timeout_ms: int = Field(15_000, ge=0)
    """``statement_timeout`` on Jobdesk's connections (web, worker, processors); 0 disables it. A slow
    page must not hold a snapshot that keeps autovacuum from cleaning the jobs table."""
    db_idle_in_transaction_timeout_ms: int = Field(30_000, ge=0)
    """``idle_in_transaction_session_timeout`` on Jobdesk's connections: also ends the transaction of a
    worker host lost in the middle of one, whose locked job rows the rescue would otherwise skip."""

    # --- worker ---------------------------------------------------------------------------------
    worker_enabled: bool = True
    """Run a worker inside ``jobdesk serve``; set false when standalone workers run the jobs."""
    max_concurrent_jobs: int = Field(10, ge=1, le=10_000)
    """Jobs one worker process runs at once."""
    job_processor_poll_interval: float = Field(1.0, gt=0, le=3600)
    """Seconds between polls when no NOTIFY arrives; only the fallback for a lost notification."""
    job_retry_intervals: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [10.0, 30.0, 60.0, 120.0, 240.0, 240.0, 240.0, 240.0, 240.0, 240.0]
    )
    """Seconds to wait before retry 1, 2, …; the last value repeats."""
    job_retry_jitter: float = Field(0.3, ge=0, le=1)
    """Fraction of random spread applied to each retry delay: 0.3 is ±30 %, so jobs that failed
    together do not all retry in the same second."""
    worker_visibility_timeout_secs: float = Field(300, gt=0, le=7 * 24 * 3600)
    """Lease length in seconds: a running job whose lease is not renewed for this long is rescued."""
    worker_heartbeat_secs: float | None = Field(None, gt=0)
    """Seconds between lease renewals; default a third of the visibility timeout."""
    worker_sweep_interval_secs: float = Field(10, gt=0, le=3600)
    """Seconds between rescue sweeps of expired leases."""
    worker_shutdown_grace_secs: float = Field(30, ge=0, le=24 * 3600)
    """Seconds a stopping worker lets running jobs finish before putting them back."""
    job_default_timeout_secs: float = Field(3600, gt=0)
    """Per-attempt time limit for job types that set none."""
    job_cancel_grace_secs: float = Field(3, ge=0, le=3600)
    """Seconds a processor gets to stop by itself after a cancel before its task is cancelled."""
    cpu_job_max_memory_mb: int = Field(1024, ge=0)
    """Address-space cap of each CPU-bound job's process, in MiB (0: no cap); a job that needs more fails
    for good, saying its file is too large to process."""
    job_retention_days: float = Field(30, gt=0)
    """Finished jobs older than this are deleted, with their events and files."""
    job_max_input_bytes: int = Field(1 * MIB, ge=1 * KIB)
    """Largest accepted ``input_data`` (JSON-encoded size); larger gets 413."""
    jobdesk_processor_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Extra Python modules (comma-separated) that register your own job types and pipeline templates."""
    job_worker_log_level: str | None = None
    """``DEBUG`` also logs every poll, claim, lease renewal and retry decision."""
    worker_metrics_addr: str | None = None
    """``host:port`` where a standalone worker serves its Prometheus metrics (``/metrics``, no auth), e.g.
    ``127.0.0.1:9108``; unset: not served. The web app's ``/metrics`` shows only its in-app worker's
    counters."""

    # --- web ------------------------------------------------------------------------------------
    jobdesk_data_dir: Path = Path(".jobdesk")
    """Embedded database, uploaded files and the generated secret key live here."""
    jobdesk_base_url: str = "http://127.0.0.1:8000"
    """Public address, used in alert links and to decide whether cookies are ``Secure``."""
    secret_key: str | None = None
    """Signs CSRF tokens. Unset: generated once and kept in ``JOBDESK_DATA_DIR/secret_key``."""
    upload_max_bytes: int = Field(25 * MIB, ge=1 * KIB)
    """Largest accepted upload; larger gets 413."""
    session_max_age_days: float = Field(14, gt=0)
    """A sign-in lasts this long."""
    forwarded_allow_ips: str = ""
    """Reverse proxies (comma-separated addresses or networks, or ``*``) whose ``X-Forwarded-For`` and
    ``X-Forwarded-Proto`` ``jobdesk serve`` believes. Empty: none; the connection's peer is the client."""
    metrics_token: str | None = None
    """Bearer token that may read ``/metrics`` without an admin session (for a Prometheus scraper)."""
    log_level: str = "INFO"

    # --- limits per user (0 disables a limit) -------------------------------------------------------
    user_max_waiting_jobs: int = Field(20_000, ge=0)
    """Jobs one person may have waiting (queued, scheduled, waiting for earlier steps or held) at once;
    admins are exempt. Room for a 10,000-row batch with as much again already waiting."""
    user_max_running_jobs: int = Field(0, ge=0)
    """Jobs of one person running at once, over every type (0: no limit); enforced in the claim, so set
    it alike on every worker (admins' jobs count too: the rule is about running slots, not permission)."""
    user_max_jobs_per_minute: int = Field(120, ge=0)
    """Submissions one person may make per minute (a job, a whole pipeline or a whole batch each count
    once; processors' next jobs do not count); admins are exempt."""
    user_max_upload_bytes: int = Field(1024 * MIB, ge=0)
    """Bytes of files one person may keep stored (uploads, used or not, and their jobs' results, until
    retention removes them); admins too."""
    pipeline_max_steps: int = Field(200, ge=0)
    """Steps one pipeline may have when it starts; admins too."""
    pipeline_max_edges: int = Field(2_000, ge=0)
    """Dependencies (``depends_on`` entries) one pipeline may have when it starts; admins too."""

    # --- alerts ----------------------------------------------------------------------------------
    slack_webhook_url: str | None = None
    """Slack incoming-webhook address; set → alerts go to Slack."""
    telegram_bot_token: str | None = None
    """Telegram bot token; needs ``TELEGRAM_CHAT_ID`` too (one without the other stops start-up)."""
    telegram_chat_id: str | None = None
    telegram_api_base: str = "https://api.telegram.org"
    """Telegram Bot API address (tests point it at a local server)."""
    alert_webhook_url: str | None = None
    """Any address that accepts a JSON POST per alert (:func:`app.alerts.webhook_body`)."""
    alert_on: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["failed", "pipeline_failed", "approval_needed", "admin_action"]
    )
    """Kinds that are sent; the others are recorded but marked ``suppressed``."""
    alert_throttle_secs: float = Field(300, ge=0, le=7 * 24 * 3600)
    """Grouping window: at most one message per kind of failure in this many seconds, then one
    "…and N more like this" summary, so an outage that fails many jobs does not flood the channel; 0 sends
    every alert on its own."""

    # --- http.request -----------------------------------------------------------------------------
    http_request_allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Hosts that ``http.request`` jobs may reach although they are loopback or private, comma-separated:
    ``name`` (any port) or ``name:port`` (that port only). The exact scheme, host and port of
    ``JOBDESK_BASE_URL`` are always allowed."""
    http_request_allow_private: bool = False
    """Let ``http.request`` jobs reach any loopback, private or link-local address (trusted users only)."""

    # --- callbacks ---------------------------------------------------------------------------------
    callback_signing_secret: str | None = None
    """Key of the ``X-Jobdesk-Signature: sha256=<HMAC of the body>`` header on the POST a job's
    ``callback_url`` gets when the job ends. Unset: ``callback_url`` is refused (422)."""
    callback_retry_intervals: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [10.0, 60.0, 300.0, 1800.0, 7200.0, 21600.0]
    )
    """Seconds between attempts of a callback that failed (a 5xx, 408, 429, a timeout or no connection);
    after the last one it is given up. A refused address or another 4xx is given up at once."""

    # --- email -----------------------------------------------------------------------------------
    smtp_host: str | None = None
    smtp_port: int = Field(25, ge=1, le=65535)
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = False
    smtp_from: str = "jobdesk@localhost"
    notification_email_quiet_secs: float = Field(60.0, ge=0, le=3600)
    """A person's notices are e-mailed once none came for this long (a failing batch is one e-mail)."""

    # --- validators -------------------------------------------------------------------------------
    @field_validator("job_retry_intervals", "callback_retry_intervals", mode="before")
    @classmethod
    def _parse_intervals(cls, value: Any) -> Any:
        return _csv_floats(value)

    @field_validator("job_retry_intervals")
    @classmethod
    def _check_intervals(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("expected at least one interval")
        if any(v < 0 or v > 30 * 24 * 3600 for v in value):
            raise ValueError("each interval must be between 0 and 2592000 seconds (30 days)")
        return value

    @field_validator("alert_on", "jobdesk_processor_modules", "http_request_allowed_hosts", mode="before")
    @classmethod
    def _parse_words(cls, value: Any) -> Any:
        return _csv_words(value)

    @field_validator("http_request_allowed_hosts")
    @classmethod
    def _check_allowed_hosts(cls, value: list[str]) -> list[str]:
        for entry in value:
            allowed_host(entry)
        return value

    @field_validator("alert_on")
    @classmethod
    def _check_alert_on(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(ALERT_KINDS))
        if unknown:
            raise ValueError(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(ALERT_KINDS)}")
        return value

    @field_validator("database_pooler", mode="before")
    @classmethod
    def _lower_pooler(cls, value: Any) -> Any:
        return value.strip().lower() or "none" if isinstance(value, str) else value

    @field_validator("database_url", "database_listen_url", "database_migrate_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        return normalize_database_url(value)

    @field_validator("log_level", "job_worker_log_level")
    @classmethod
    def _check_level(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        level = value.upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return level

    @field_validator("slack_webhook_url", "alert_webhook_url", "telegram_bot_token", "telegram_chat_id")
    @classmethod
    def _blank_is_unset(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @field_validator("slack_webhook_url", "alert_webhook_url", "telegram_api_base")
    @classmethod
    def _check_alert_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("expected an http:// or https:// address")
        return value

    @field_validator("worker_metrics_addr")
    @classmethod
    def _check_metrics_addr(cls, value: str | None) -> str | None:
        if value is None or value.strip() == "":
            return None
        host, sep, port = value.strip().rpartition(":")
        number = whole(port)
        if not sep or number is None or not 0 < number < 65536:
            raise ValueError("expected host:port, e.g. 127.0.0.1:9108 (0.0.0.0:9108 inside a container)")
        return f"{host or '0.0.0.0'}:{port}"

    @property
    def worker_metrics_bind(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``WORKER_METRICS_ADDR``, or ``None``."""
        if not self.worker_metrics_addr:
            return None
        host, _, port = self.worker_metrics_addr.rpartition(":")
        return host.strip("[]"), int(port)

    @field_validator("jobdesk_base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// address")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _check_telegram(self) -> Settings:
        if bool(self.telegram_bot_token) != bool(self.telegram_chat_id):
            missing = "TELEGRAM_CHAT_ID" if self.telegram_bot_token else "TELEGRAM_BOT_TOKEN"
            raise ValueError(
                f"Telegram alerts need both TELEGRAM_BOT_TOKEN and TELEGRAM_CHAT_ID; {missing} is not set"
            )
        return self

    @model_validator(mode="after")
    def _check_pooler(self) -> Settings:
        if self.database_pooler == "none":
            return self
        if not self.database_url:
            raise ValueError(
                f"DATABASE_POOLER={self.database_pooler} needs DATABASE_URL, the pooler's address "
                "(without DATABASE_URL Jobdesk uses its embedded PostgreSQL directly)"
            )
        if self.database_pooler == "transaction" and not self.database_listen_url:
            raise ValueError(
                "DATABASE_POOLER=transaction needs DATABASE_LISTEN_URL, a direct address of the PostgreSQL "
                "server: notifications cannot reach a listener through transaction pooling"
            )
        return self

    @model_validator(mode="after")
    def _check_heartbeat(self) -> Settings:
        if (
            self.worker_heartbeat_secs is not None
            and self.worker_heartbeat_secs >= self.worker_visibility_timeout_secs
        ):
            raise ValueError("WORKER_HEARTBEAT_SECS must be shorter than WORKER_VISIBILITY_TIMEOUT_SECS")
        return self

    # --- derived ----------------------------------------------------------------------------------
    @property
    def heartbeat_secs(self) -> float:
        """Seconds between lease renewals: a third of the lease unless set, so two renewals can fail
        before the lease runs out."""
        return self.worker_heartbeat_secs or self.worker_visibility_timeout_secs / 3

    @property
    def default_max_attempts(self) -> int:
        """Retry schedule length + 1: the first run plus one retry per interval."""
        return len(self.job_retry_intervals) + 1

    @property
    def data_dir(self) -> Path:
        return self.jobdesk_data_dir.expanduser().resolve()

    @property
    def files_dir(self) -> Path:
        return self.data_dir / "files"

    @property
    def cookies_secure(self) -> bool:
        return self.jobdesk_base_url.startswith("https://")

    def resolved_secret_key(self) -> str:
        """``SECRET_KEY``, or a key generated once and kept in the data directory (mode 0600)."""
        if self.secret_key:
            return self.secret_key
        path = self.data_dir / "secret_key"
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # written aside and linked into place: of several processes starting at once, the first link
        # wins and every process reads that one key (a key per process would fail forms across them)
        draft = path.with_name(f".secret_key.{os.getpid()}")
        draft.touch(mode=0o600)
        draft.write_text(secrets.token_urlsafe(48))
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
        return path.read_text().strip()


def normalize_database_url(url: str) -> str:
    """Return ``url`` with the ``postgresql+asyncpg`` scheme.

    Accepts ``postgres://`` (the form many hosting providers give), ``postgresql://`` and
    ``postgresql+asyncpg://``.

    Raises:
        ValueError: the URL is not a PostgreSQL URL, or has no database name.
    """
    url = url.strip()
    for prefix in ("postgres://", "postgresql://", "postgresql+asyncpg://"):
        if url.startswith(prefix):
            rest = url[len(prefix) :]
            break
    else:
        raise ValueError(
            "expected a postgresql:// URL, e.g. postgresql://user:password@localhost:5432/jobdesk"
        )
    normalized = "postgresql+asyncpg://" + rest
    try:
        parsed = make_url(normalized)
    except ArgumentError as exc:
        raise ValueError(f"could not parse the URL: {exc}") from None
    if not parsed.database:
        raise ValueError("the URL names no database, e.g. postgresql://localhost:5432/jobdesk")
    return normalized


ENV_NAMES = {name: name.upper() for name in Settings.model_fields}


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the environment (and ``overrides``, used by tests).

    Raises:
        SettingsError: one line per bad variable, naming it and what it expects.
    """
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else ""
            name = ENV_NAMES.get(field, field.upper()) or "configuration"
            msg = err["msg"].removeprefix("Value error, ")
            given = err.get("input")
            shown = (
                f" (got {given!r})"
                if isinstance(given, str | int | float) and not isinstance(given, bool)
                else ""
            )
            lines.append(f"{name}: {msg}{shown}")
        raise SettingsError("Invalid configuration:\n  " + "\n  ".join(lines)) from None


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return load_settings()
