"""``jobdesk demo`` as a person runs it: ``jobdesk serve`` with its worker on this test's
database, then the demo command as a subprocess; every job and pipeline it printed reaches its expected
end state (the CSV review pipeline after an admin approves it), and the email reaches the local mail
server the demo ran. Unknown users and missing samples are one-line errors."""

from __future__ import annotations

import asyncio
import email
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import asyncpg

from app.db import asyncpg_dsn
from app.jobs import queue
from tests.support.webkit import add_user, running_server
from tests.support.workers import wait_until

ROOT = Path(__file__).resolve().parents[2]
JOBDESK = Path(sys.executable).parent / "jobdesk"
FAST = {
    "JOB_RETRY_INTERVALS": "0.2,0.2",
    "JOB_RETRY_JITTER": "0",
    "JOB_PROCESSOR_POLL_INTERVAL": "0.5",
    "LOG_LEVEL": "WARNING",
}


def demo_cmd(
    db_url: str, data_dir: Path, base: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in {"TEST_DATABASE_URL", "SMTP_HOST"}}
    full.update(
        DATABASE_URL=db_url,
        JOBDESK_DATA_DIR=str(data_dir),
        JOBDESK_BASE_URL=base,
        SECRET_KEY="demo-test-secret-key-0123456789abcdef",
        LOG_LEVEL="WARNING",
        **env,
    )
    cmd = [str(JOBDESK)] if JOBDESK.exists() else [sys.executable, "-m", "app.cli"]
    return subprocess.run(
        [*cmd, "demo", *args], capture_output=True, text=True, env=full, cwd=data_dir, timeout=240
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


async def test_demo_submits_everything_and_each_reaches_its_end_state(db_url, tmp_path) -> None:
    data_dir = tmp_path / "data"
    user = await add_user(db_url, "newcomer@example.com")
    admin = await add_user(db_url, "admin@example.com", admin=True)
    with running_server(db_url, data_dir, WORKER_ENABLED="true", **FAST) as base:
        result = await asyncio.to_thread(demo_cmd, db_url, data_dir, base, "--email", "Newcomer@Example.com")
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        links = re.findall(rf"{re.escape(base)}/(jobs|pipelines)/([0-9a-f-]{{36}})", out)
        assert len(links) == 11, out
        (batch,) = re.findall(rf"{re.escape(base)}/batches/([0-9a-f-]{{36}})", out)
        assert "No SMTP_HOST is set: the email goes to a local mail server on 127.0.0.1:" in out
        assert "The email was delivered to the local mail server and saved as" in out
        assert "Two jobs fail on purpose" in out
        assert "No worker is running" not in out

        pg = await asyncpg.connect(asyncpg_dsn(db_url))
        try:
            jobs = [uuid for kind, uuid in links if kind == "jobs"]
            pipes = [uuid for kind, uuid in links if kind == "pipelines"]
            rows = {
                r["type"] + ("!" if "fails on purpose" in r["title"] else ""): dict(r)
                for r in await pg.fetch(
                    "SELECT id::text, type, title, status, user_id, error_message FROM jobs WHERE id = ANY($1::uuid[])",
                    jobs,
                )
            }
            assert set(rows) == {
                "http.request",
                "email.send",
                "images.thumbnail",
                "images.contact_sheet",
                "report.csv_check",
                "report.csv_summary",
                "images.thumbnail!",
                "report.csv_summary!",
            }
            assert all(r["user_id"] == user.id for r in rows.values())

            async def settled() -> bool:
                statuses = await pg.fetch("SELECT status FROM jobs WHERE id = ANY($1::uuid[])", jobs)
                return all(r["status"] in ("completed", "failed") for r in statuses)

            await wait_until(settled, timeout=120, what="the demo jobs to finish")
            final = {
                r["id"]: r["status"]
                for r in await pg.fetch("SELECT id::text, status FROM jobs WHERE id = ANY($1::uuid[])", jobs)
            }
            for key, row in rows.items():
                assert final[row["id"]] == ("failed" if key.endswith("!") else "completed"), (key, row)
            http = await pg.fetchval(
                "SELECT result_data FROM jobs WHERE id = $1::uuid", rows["http.request"]["id"]
            )
            assert '"status": 200' in http
            assert f"{base}/healthz" in http
            # the worker tells the CPU-bound contact sheet the pictures' names (a trial found "Picture 1")
            sheet = json.loads(
                await pg.fetchval(
                    "SELECT result_data FROM jobs WHERE id = $1::uuid", rows["images.contact_sheet"]["id"]
                )
            )
            assert sheet["zip_members"], sheet
            assert not any("Picture" in m for m in sheet["zip_members"]), sheet
            errors = {
                r["type"]: r["error_message"]
                for r in await pg.fetch(
                    "SELECT type, error_message FROM jobs WHERE id = ANY($1::uuid[]) AND status = 'failed'",
                    jobs,
                )
            }
            assert "damaged JPEG file" in errors["images.thumbnail"]
            assert "not a CSV file: it looks like a web page" in errors["report.csv_summary"]

            photo, review, reviewed = pipes
            await wait_until(
                lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1::uuid", photo),
                timeout=120,
                what="the photo batch",
            )
            # one thumbnail step per picture (for_each over 4) and the sheet
            assert await pg.fetchval("SELECT count(*) FROM jobs WHERE pipeline_id = $1::uuid", photo) == 5
            check = await wait_until(
                lambda: pg.fetchval(
                    "SELECT id FROM jobs WHERE pipeline_id = $1::uuid AND step_key = 'check' AND status = 'waiting_approval'",
                    review,
                ),
                timeout=60,
                what="the review pipeline to wait for approval",
            )
            from app.db import create_engine

            engine = create_engine(db_url, pool_size=1)
            try:
                async with engine.begin() as conn:
                    await queue.approve(conn, check, admin)
            finally:
                await engine.dispose()
            await wait_until(
                lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1::uuid", review),
                timeout=120,
                what="the review pipeline after approval",
            )
            # the spreadsheet batch: one web request per row, to the demo's own pages, all done
            await wait_until(
                lambda: pg.fetchval(
                    "SELECT count(*) = 5 AND bool_and(status = 'completed') FROM jobs WHERE batch_id = $1::uuid",
                    batch,
                ),
                timeout=120,
                what="the spreadsheet batch",
            )
            # the step that names the demo user as its approver: they decide it, though not an admin
            named = await wait_until(
                lambda: pg.fetchval(
                    "SELECT id FROM jobs WHERE pipeline_id = $1::uuid AND status = 'waiting_approval'",
                    reviewed,
                ),
                timeout=60,
                what="the reviewed health check to wait for its approver",
            )
            engine = create_engine(db_url, pool_size=1)
            try:
                async with engine.begin() as conn:
                    assert (await queue.approve(conn, named, user))["status"] == "completed"
            finally:
                await engine.dispose()
            outputs = await pg.fetchval(
                "SELECT count(*) FROM files WHERE job_id IS NOT NULL AND user_id = $1", user.id
            )
            assert outputs >= 10  # thumbnails, sheets, zips, reports: all downloadable, all the user's
        finally:
            await pg.close()

    mail_dir = data_dir / "demo-mail"
    (eml,) = list(mail_dir.glob("*.eml"))
    assert list(mail_dir.glob("*.json")) == []  # the note for the email job is removed afterwards
    msg = email.message_from_bytes(eml.read_bytes())
    assert msg["To"] == "newcomer@example.com"
    assert msg["Subject"] == "Hello from the Jobdesk demo"


async def test_demo_errors_are_one_line(db_url, tmp_path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    base = "http://127.0.0.1:9"
    unknown = await asyncio.to_thread(demo_cmd, db_url, data_dir, base, "--email", "nobody@example.com")
    assert_one_line_error(
        unknown, "No user with the email nobody@example.com", "jobdesk create-user nobody@example.com"
    )
    await add_user(db_url, "someone@example.com")
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = await asyncio.to_thread(
        demo_cmd, db_url, data_dir, base, "--email", "someone@example.com", "--samples", str(empty)
    )
    assert_one_line_error(missing, "The sample files are missing from", "images/rocket.jpg")
    # nothing answers at JOBDESK_BASE_URL (e.g. the app runs on another port): refused before submitting
    elsewhere = await asyncio.to_thread(demo_cmd, db_url, data_dir, base, "--email", "someone@example.com")
    assert_one_line_error(elsewhere, "Jobdesk does not answer at http://127.0.0.1:9/healthz", "make demo")
    no_option = await asyncio.to_thread(demo_cmd, db_url, data_dir, base)
    assert no_option.returncode == 2
    assert "Missing option '--email'" in no_option.stderr
    pg = await asyncpg.connect(asyncpg_dsn(db_url))
    try:
        assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
        assert await pg.fetchval("SELECT count(*) FROM files") == 0
    finally:
        await pg.close()
    assert not (data_dir / "files").exists() or list((data_dir / "files").iterdir()) == []
