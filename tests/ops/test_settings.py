"""Settings from the environment: every bad value names its variable."""

from __future__ import annotations

import pytest

from app.settings import SettingsError, load_settings


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        ({"MAX_CONCURRENT_JOBS": "abc"}, ["MAX_CONCURRENT_JOBS:", "valid integer", "'abc'"]),
        ({"JOB_RETRY_INTERVALS": "1,x"}, ["JOB_RETRY_INTERVALS:", "comma-separated seconds", "'1,x'"]),
        ({"DATABASE_URL": "mysql://h/db"}, ["DATABASE_URL:", "expected a postgresql:// URL"]),
        ({"DATABASE_URL": "postgresql://h:5432"}, ["DATABASE_URL:", "names no database"]),
        ({"JOBDESK_BASE_URL": "jobs.example.com"}, ["JOBDESK_BASE_URL:", "http:// or https://"]),
        ({"LOG_LEVEL": "LOUD"}, ["LOG_LEVEL:", "DEBUG, INFO"]),
        ({"WORKER_ENABLED": "maybe"}, ["WORKER_ENABLED:"]),
    ],
)
def test_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], needles: list[str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("Invalid configuration:")
    for needle in needles:
        assert needle in message


def test_several_bad_values_are_all_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_CONCURRENT_JOBS", "abc")
    monkeypatch.setenv("DB_POOL_SIZE", "-1")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "MAX_CONCURRENT_JOBS:" in str(caught.value)
    assert "DB_POOL_SIZE:" in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p@db.example:5432/jobs",
        "postgresql+asyncpg://u:p@db.example:5432/jobs",
        "postgres://u:p@db.example:5432/jobs",
    ],
)
def test_database_url_accepts_both_schemes(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("DATABASE_URL", url)
    assert load_settings().database_url == "postgresql+asyncpg://u:p@db.example:5432/jobs"


def test_unset_database_url_means_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert load_settings().database_url is None
    monkeypatch.setenv("DATABASE_URL", "  ")
    assert load_settings().database_url is None


def test_cookies_are_secure_only_behind_https(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not load_settings(jobdesk_base_url="http://127.0.0.1:8000").cookies_secure
    assert load_settings(jobdesk_base_url="https://jobs.example.com/").cookies_secure
