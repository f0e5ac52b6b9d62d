"""The embedded PostgreSQL used when DATABASE_URL is unset."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import app.db as db
from app.db import DatabaseUnavailable, root_embedded_conflicts


def test_home_folders_are_conflicts_for_root() -> None:
    assert Path("/root") in root_embedded_conflicts([Path("/root/src/jobdesk/.jobdesk/pgdata")])
    assert Path("/home") in root_embedded_conflicts([Path("/home/ann/jobdesk/.jobdesk/pgdata")])
    assert root_embedded_conflicts([Path("/srv/jobdesk/.jobdesk/pgdata"), Path("/opt/venv/lib/pg/bin")]) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal only applies when running as root")
def test_root_refusal_message_says_where_to_put_things(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Treat this test's temp folder as a home folder, rather than writing under the real /root.
    fake_home = tmp_path / "home-of-someone"
    monkeypatch.setattr(db, "_home_dirs", lambda: {fake_home})
    monkeypatch.setattr(db, "_embedded_server", None)
    with pytest.raises(DatabaseUnavailable) as caught:
        db.start_embedded_postgres(fake_home / "jobdesk" / ".jobdesk")
    message = str(caught.value)
    assert message.startswith("Refusing to start the embedded PostgreSQL as root")
    assert str(fake_home) in message
    assert "/srv/jobdesk" in message
    assert "JOBDESK_DATA_DIR" in message
    assert "DATABASE_URL" in message
    assert not (fake_home / "jobdesk" / ".jobdesk" / "pgdata" / "PG_VERSION").exists()


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from sqlalchemy import text
    from app.db import create_engine, start_embedded_postgres

    async def main(url):
        engine = create_engine(url, pool_size=1)
        async with engine.connect() as conn:
            version = (await conn.execute(text("SHOW server_version_num"))).scalar()
        await engine.dispose()
        return version

    url = start_embedded_postgres(Path(sys.argv[1]))
    print(url)
    print(asyncio.run(main(url)))
    """
)


@pytest.mark.slow
def test_start_embedded_postgres_in_a_temp_dir(tmp_path: Path) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    if os.geteuid() == 0 and root_embedded_conflicts([Path(POSTGRES_BIN_PATH).resolve()]):
        pytest.skip(
            "as root with the virtualenv under a home folder the embedded server is refused by design"
        )
    data = tmp_path / "data"
    for _ in range(2):  # the second run reuses the data directory
        result = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(data)],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert result.returncode == 0, result.stderr
        url, version = result.stdout.split()
        assert url.startswith("postgresql+asyncpg://postgres@/postgres")
        assert int(version) >= 150000
    assert (data / "pgdata" / "PG_VERSION").exists()
