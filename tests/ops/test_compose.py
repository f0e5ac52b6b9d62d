"""docker-compose.yml has the production shape: PostgreSQL, a one-shot ``migrate``, the web app without a
worker and separate workers (Docker does not run here: parse it)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_services_and_their_roles() -> None:
    services = _compose()["services"]
    assert {"postgres", "migrate", "web", "worker"} <= set(services)

    pg = services["postgres"]
    assert pg["image"] == "postgres:16"
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])

    migrate, web, worker = services["migrate"], services["web"], services["worker"]
    assert migrate["command"] == ["jobdesk", "migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for svc in (web, worker):
        assert svc["depends_on"]["migrate"]["condition"] == "service_completed_successfully"

    assert web["command"][:2] == ["jobdesk", "serve"]
    assert "--no-migrate" in web["command"]
    assert web["environment"]["WORKER_ENABLED"] == "false"
    assert worker["command"] == ["jobdesk", "worker"]
    assert "WORKER_ENABLED" not in worker["environment"] or worker["environment"]["WORKER_ENABLED"] != "false"

    # one image for every Jobdesk process, all on the same database and shared data volume
    assert {svc["image"] for svc in (migrate, web, worker)} == {"jobdesk:latest"}
    assert all(svc["build"] == "." for svc in (migrate, web, worker))
    urls = {svc["environment"]["DATABASE_URL"] for svc in (migrate, web, worker)}
    assert urls == {"postgresql://jobdesk:jobdesk@postgres:5432/jobdesk"}
    assert all("jobdesk-data:/data" in svc["volumes"] for svc in (web, worker))


def test_dockerfile_builds_the_one_image_from_this_checkout() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for needed in (
        "COPY app",
        "COPY migrations",
        "COPY templates",
        "COPY static",
        "COPY worker.py",
        "pip install",
        "compileall -q app",  # PYTHONDONTWRITEBYTECODE: without it, every start compiles app/ again
    ):
        assert needed in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored
    assert ".jobdesk" in ignored
