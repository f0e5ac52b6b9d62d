"""A job reads only its owner's files, on every path a file id can take, through the real app and worker.

The attack: an API user names ``/etc/passwd``, ``../secret_key``, ``/proc/self/environ`` or another
user's upload as a file — inline, through ``{"$ref": …}`` from a parent step, or in a parent's
``files`` list — for every processor that reads files (``images.thumbnail``, ``images.contact_sheet``,
``images.batch``, ``report.csv_check``, ``report.csv_summary``). Inline, a non-UUID or another user's id
is a 422 naming the field; on the other paths the reading step fails at its first attempt with a
clear message. No foreign bytes appear in any output, whoever the attacker is (an admin's job acts for
the admin, so it cannot read another user's files either). Also: zip member names are plain file names,
and stored content types are derived from the bytes.
"""

from __future__ import annotations

import io
import uuid
import zipfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from app.file_types import derive_type, served_type
from app.files import FileStore, parse_file_id
from app.processors.images import make_contact_sheet, member_name
from app.settings import Settings
from tests.support.procs import EXAMPLES, as_dict, cpu_context, put_file, upload
from tests.support.webkit import add_token, add_user, app_client
from tests.support.workers import running_worker, wait_until

PICTURE = EXAMPLES / "images" / "horse.png"
VICTIM_PICTURE = EXAMPLES / "images" / "chelsea.jpg"
CSV = EXAMPLES / "csv" / "penguins.csv"
READERS = [
    # (job type, file field, list field?, kind of file it reads)
    ("images.thumbnail", "image", False, "picture"),
    ("images.contact_sheet", "images", True, "picture"),
    ("images.batch", "images", True, "picture"),
    ("report.csv_check", "file", False, "csv"),
    ("report.csv_summary", "file", False, "csv"),
]
PATHS = ["/etc/passwd", "../secret_key", "/proc/self/environ", "../../../../etc/hostname"]
SECRET = "JOBDESK-TEST-SECRET-7c1f0d"
VICTIM_MARK = b"victim,penguin,7c1f0d\n"
PASSWD_HEAD = Path("/etc/passwd").read_bytes()[:40]


@dataclass
class Person:
    id: int
    headers: dict[str, str]
    picture: str
    csv: str


@dataclass
class Scene:
    client: AsyncTestClient
    settings: Settings
    pg: asyncpg.Connection
    victim: Person
    user: Person
    admin: Person

    def forged(self, kind: str) -> list[str]:
        """Every forged file id for a reader of ``kind``: paths, and the victim's real upload."""
        return [*PATHS, self.victim.picture if kind == "picture" else self.victim.csv]


async def _person(settings: Settings, engine: Any, email: str, admin: bool = False) -> Person:
    user = await add_user(settings.database_url or "", email, admin=admin)
    token = await add_token(settings.database_url or "", user.id)
    victim = email.startswith("victim")
    csv = CSV.read_bytes() + (VICTIM_MARK if victim else b"")
    return Person(
        user.id,
        {"Authorization": f"Bearer {token}"},
        await upload(engine, settings, user.id, path=VICTIM_PICTURE if victim else PICTURE),
        await upload(engine, settings, user.id, data=csv, name="penguins.csv"),
    )


@pytest.fixture
async def scene(make_settings: Any, engine: Any, pg: asyncpg.Connection) -> AsyncIterator[Scene]:
    # One job at a time: the CPU-process slots (app.worker.cpu) are an asyncio.Semaphore made once per
    # process, which cannot be waited on from the next test's event loop once it was waited on here.
    settings = make_settings(worker_enabled=False, max_concurrent_jobs=1)
    settings.files_dir.mkdir(parents=True, exist_ok=True)
    (settings.files_dir.parent / "secret_key").write_text(SECRET)
    victim = await _person(settings, engine, "victim@example.com")
    user = await _person(settings, engine, "mallory@example.com")
    admin = await _person(settings, engine, "root@example.com", admin=True)
    async with app_client(settings) as client:
        yield Scene(client, settings, pg, victim, user, admin)


def _input(field: str, many: bool, value: Any) -> dict[str, Any]:
    return {field: [value] if many else value}


async def _settle(scene: Scene, pipeline_ids: list[str], timeout: float = 120) -> None:
    async def done() -> bool:
        open_ = await scene.pg.fetchval(
            "SELECT count(*) FROM pipelines WHERE id = ANY($1::uuid[]) AND status NOT IN "
            "('completed', 'failed', 'cancelled')",
            pipeline_ids,
        )
        return open_ == 0

    async with running_worker(scene.settings):
        await wait_until(done, timeout=timeout, what="the pipelines to finish")


async def _step(scene: Scene, pipeline_id: str, key: str) -> dict[str, Any]:
    row = await scene.pg.fetchrow(
        "SELECT * FROM jobs WHERE pipeline_id = $1::uuid AND step_key = $2", pipeline_id, key
    )
    assert row is not None, (pipeline_id, key)
    return dict(row)


async def _assert_no_foreign_bytes(scene: Scene, attacker: Person) -> None:
    """No output of the attacker's jobs holds the victim's bytes, a system file or the secret; nor does any
    result or error message."""
    store = FileStore(scene.settings.files_dir)
    victim_bytes = {store.path(scene.victim.picture).read_bytes(), store.path(scene.victim.csv).read_bytes()}
    system = [PASSWD_HEAD, SECRET.encode(), VICTIM_MARK]
    outputs = await scene.pg.fetch(
        "SELECT id, name FROM files WHERE user_id = $1 AND job_id IS NOT NULL", attacker.id
    )
    for out in outputs:
        data = store.path(str(out["id"])).read_bytes()
        blobs = [data]
        if data.startswith(b"PK"):
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                blobs += [zf.read(n) for n in zf.namelist()]
        for blob in blobs:
            assert blob not in victim_bytes, out["name"]
            assert not any(s in blob for s in system), out["name"]
    texts = await scene.pg.fetch(
        "SELECT coalesce(result_data::text, '') || coalesce(error_message, '') AS t FROM jobs WHERE user_id = $1",
        attacker.id,
    )
    for row in texts:
        assert "root:" not in row["t"]
        assert SECRET not in row["t"]
        assert "victim,penguin" not in row["t"]


# --- inline: refused at submission, naming the field --------------------------------------------------


def _type_refused(r: Any, field: str, role: str) -> bool:
    """A person's submission refused for its job type (an internal step only admins may start on its
    own), before any file id is looked at; never the answer an admin gets."""
    if r.status_code == 403 or (r.status_code == 422 and set(r.json()["errors"]) == {field}):
        assert role == "user", r.text
        return True
    return False


@pytest.mark.parametrize("role", ["user", "admin"])
async def test_forged_file_ids_given_inline_are_a_422_naming_the_field(scene: Scene, role: str) -> None:
    attacker: Person = getattr(scene, role)
    for type_, field, many, kind in READERS:
        for forged in scene.forged(kind):
            data = _input(field, many, forged)
            path = f"input_data.{field}" + ("[0]" if many else "")
            r = await scene.client.post(
                "/api/jobs", json={"type": type_, "input_data": data}, headers=attacker.headers
            )
            assert r.status_code in (403, 422), (type_, forged, r.text)
            if not _type_refused(r, "type", role):
                assert path in r.json()["errors"], (type_, forged, r.json())
            r = await scene.client.post(
                "/api/pipelines",
                json={"name": "x", "steps": [{"key": "read", "type": type_, "input_data": data}]},
                headers=attacker.headers,
            )
            assert r.status_code in (403, 422), (type_, forged, r.text)
            if not _type_refused(r, "steps[0].type", role):
                assert f"steps[0].{path}" in r.json()["errors"], (type_, forged, r.json())
    for template, value in (
        ("photo_batch", {"images": [scene.victim.picture]}),
        ("csv_review", {"file": scene.victim.csv}),
    ):
        r = await scene.client.post(
            "/api/pipelines", json={"template": template, "input_data": value}, headers=attacker.headers
        )
        assert r.status_code == 422, r.text
    assert await scene.pg.fetchval("SELECT count(*) FROM jobs") == 0


# --- through $ref from a parent, and in a parent's result list: the step fails --------------------------


async def _submit(scene: Scene, attacker: Person, steps: list[dict[str, Any]]) -> str | None:
    """The pipeline's id; ``None`` if the attacker may not submit a ``noop`` step at all (the attack is
    then refused before anything runs)."""
    r = await scene.client.post(
        "/api/pipelines", json={"name": "attack", "steps": steps}, headers=attacker.headers
    )
    if r.status_code == 403 or (r.status_code == 422 and "steps[0].type" in r.json().get("errors", {})):
        assert attacker is scene.user
        return None
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _assert_refused(step: dict[str, Any], forged: str) -> None:
    """Failed at its first attempt (a permanent error), saying why in words."""
    assert step["status"] == "failed", step
    assert step["attempts"] == 1, step
    message = step["error_message"]
    if forged in PATHS:
        assert "not valid" in message or "not available to this job" in message, message
    else:
        assert (
            "not available to this job" in message
            or "does not exist, is no longer stored, or is not yours" in message
        ), message
    assert "Traceback" not in message


@pytest.mark.parametrize("role", ["user", "admin"])
async def test_forged_file_ids_through_ref_fail_every_reader(scene: Scene, role: str) -> None:
    attacker: Person = getattr(scene, role)
    made: list[tuple[str, str, str]] = []
    for type_, field, many, kind in READERS:
        for forged in scene.forged(kind):
            ref = {"$ref": "src.ids"} if many else {"$ref": "src.id"}
            pid = await _submit(
                scene,
                attacker,
                [
                    {"key": "src", "type": "noop", "input_data": {"id": forged, "ids": [forged]}},
                    {"key": "read", "type": type_, "input_data": {field: ref}, "depends_on": ["src"]},
                ],
            )
            if pid is not None:
                made.append((pid, type_, forged))
    if not made:
        return
    await _settle(scene, [p for p, _, _ in made])
    for pid, type_, forged in made:
        _assert_refused(await _step(scene, pid, "read") | {"type": type_}, forged)
    await _assert_no_foreign_bytes(scene, attacker)


@pytest.mark.parametrize("role", ["user", "admin"])
async def test_forged_files_in_a_parents_result_fail_the_contact_sheet(scene: Scene, role: str) -> None:
    """The critical case as reported: a ``noop`` step whose result lists forged files, then a contact
    sheet of its "thumbnails". One forged entry among the attacker's own file is enough to fail the
    step; the attacker's own files alone make a sheet whose zip holds only them, named as stored."""
    attacker: Person = getattr(scene, role)
    own = {"file_id": attacker.picture, "name": "../../etc/cron.d/evil", "size": 1}
    lists = {
        forged: [own, {"file_id": forged, "name": forged, "size": 1}] for forged in scene.forged("picture")
    }
    lists["all"] = [{"file_id": f, "name": f, "size": 1} for f in scene.forged("picture")]
    made: dict[str, str] = {}
    for label, files in [*lists.items(), ("own", [own])]:
        pid = await _submit(
            scene,
            attacker,
            [
                {"key": "src", "type": "noop", "input_data": {"files": files}},
                {"key": "sheet", "type": "images.contact_sheet", "depends_on": ["src"]},
            ],
        )
        if pid is not None:
            made[label] = pid
    if not made:
        return
    await _settle(scene, list(made.values()))
    for label, pid in made.items():
        step = await _step(scene, pid, "sheet")
        if label == "own":
            assert step["status"] == "completed", step
            zip_ref = next(f for f in as_dict(step["result_data"])["files"] if f["name"] == "thumbnails.zip")
            with zipfile.ZipFile(FileStore(scene.settings.files_dir).path(zip_ref["file_id"])) as zf:
                assert zf.namelist() == ["horse.png"]
        else:
            _assert_refused(step, label if label != "all" else PATHS[0])
            assert "not available to this job" in step["error_message"]
    await _assert_no_foreign_bytes(scene, attacker)


async def test_a_file_is_checked_again_when_the_job_reads_it(scene: Scene) -> None:
    """Ownership is asked of the database when the file is read, not only at submission: a file that
    stopped being the job owner's in between is refused (CPU-bound and in-process readers alike)."""
    attacker = scene.user
    jobs = {}
    for type_, field, many, kind in READERS:
        own = attacker.picture if kind == "picture" else attacker.csv
        r = await scene.client.post(
            "/api/jobs",
            json={"type": type_, "input_data": _input(field, many, own)},
            headers=attacker.headers,
        )
        if _type_refused(r, "type", "user"):
            continue  # an internal step that people may not submit themselves
        assert r.status_code == 201, r.text
        jobs[type_] = r.json()["id"]
    await scene.pg.execute(
        "UPDATE files SET user_id = $1 WHERE id = ANY($2::uuid[])",
        scene.victim.id,
        [attacker.picture, attacker.csv],
    )
    async with running_worker(scene.settings):

        async def settled() -> bool:
            return await scene.pg.fetchval(
                "SELECT count(*) FROM jobs WHERE id = ANY($1::uuid[]) AND status = 'failed'",
                list(jobs.values()),
            ) == len(jobs)

        await wait_until(settled, timeout=60, what="the readers to fail")
    for jid in jobs.values():
        row = dict(await scene.pg.fetchrow("SELECT * FROM jobs WHERE id = $1::uuid", jid))
        _assert_refused(row, attacker.picture)
    await _assert_no_foreign_bytes(scene, attacker)


# --- the file store and the child process -----------------------------------------------------------


def test_a_file_id_is_a_uuid_and_nothing_else(tmp_path: Path) -> None:
    good = uuid.uuid4()
    assert parse_file_id(str(good)) == good == parse_file_id(good)
    for bad in [
        "/etc/passwd",
        "../secret_key",
        f"../{good}",
        f"{good}/..",
        f" {good}",
        f"{good}\n",
        f"urn:uuid:{good}",
        f"{{{good}}}",
        good.hex,
        "",
        None,
        5,
    ]:
        with pytest.raises(ValueError):
            parse_file_id(bad)
        with pytest.raises(ValueError):
            FileStore(tmp_path).path(bad)  # type: ignore[arg-type]


def test_a_cpu_step_reaches_only_the_files_resolved_for_it(tmp_path: Path) -> None:
    """A CPU-bound processor gets a map of its resolved files; any other id — a path, or a real file
    next to them that was not resolved — is its permanent error, never a path join."""
    files = tmp_path / "files"
    fid = put_file(files, PICTURE)
    (tmp_path / "secret_key").write_text(SECRET)
    with cpu_context("images.thumbnail", {"image": fid}, files) as ctx:
        for forged in ["../secret_key", str(tmp_path / "secret_key"), str(uuid.uuid4())]:
            with pytest.raises(Exception, match="not available to this job"):
                ctx.input_path(forged, "picture")
        assert ctx.input_path(fid) == files / fid


# --- zip member names -------------------------------------------------------------------------------


def test_member_names_are_plain_file_names() -> None:
    cases = {
        "../../x.jpg": "x.jpg",
        "/etc/cron.d/x": "x",
        "C:\\Windows\\evil.jpg": "evil.jpg",
        "..": "file",
        "...jpg": "jpg",
        ".hidden": "hidden",
        "a\x00b\r\nc.jpg": "abc.jpg",
        "": "file",
    }
    for given, expected in cases.items():
        assert member_name(given) == expected, given


def test_the_zip_of_a_contact_sheet_has_plain_unique_member_names(tmp_path: Path) -> None:
    names = ["../../x.jpg", "/etc/cron.d/x.jpg", "..", "a\\b.jpg", "X.JPG", "x.jpg", "sub/dir/"]
    ids = [put_file(tmp_path, PICTURE) for _ in names]
    parents = {
        "src": {"files": [{"file_id": i, "name": "ignored", "size": 1} for i in ids]},
    }
    with cpu_context(
        "images.contact_sheet", {}, tmp_path, parents=parents, file_names=dict(zip(ids, names, strict=True))
    ) as ctx:
        result = make_contact_sheet(ctx)
        with zipfile.ZipFile(result.files[1].path) as zf:
            members = zf.namelist()
    assert len(members) == len(names) == len({m.lower() for m in members})
    for m in members:
        assert "/" not in m, m
        assert "\\" not in m, m
        assert not m.startswith("."), m
        assert ".." not in m, m
    assert members[:2] == ["x.jpg", "x-2.jpg"]


# --- content types ----------------------------------------------------------------------------------


def test_content_types_are_derived_from_the_bytes() -> None:
    png = PICTURE.read_bytes()[:64]
    assert derive_type(png, "x.html", "text/html") == "image/png"
    assert derive_type(b"%PDF-1.4 ...", "a.txt", "text/plain") == "application/pdf"
    assert derive_type(b"PK\x03\x04...", "book.xlsx", None).endswith("spreadsheetml.sheet")
    assert derive_type(b"PK\x03\x04...", "x.js", None) == "application/zip"
    assert derive_type(b"alert(1)", "x.js", "application/javascript") == "application/octet-stream"
    assert derive_type(b"<svg onload=alert(1)>", "x.svg", "image/svg+xml") == "application/octet-stream"
    assert derive_type(b"a,b\n1,2\n", "x.csv", "text/csv\r\nX-Evil: 1") == "text/csv"
    assert derive_type(b"a,b\n1,2\n", "x.bin", "text/csv; charset=utf-8") == "text/csv"
    assert derive_type(b"a\x00b", "x.txt", "text/plain") == "application/octet-stream"
    assert derive_type(b"hello", "notes", "image/png") == "application/octet-stream"
    assert served_type("text/html\x01") == served_type("application/javascript") == "application/octet-stream"
    assert served_type("image/png") == "image/png"


async def test_uploads_store_a_derived_type_and_downloads_are_safe(scene: Scene) -> None:
    h = scene.user.headers
    cases = [
        (
            ("evil.js", b"alert(document.cookie)", "application/javascript"),
            "application/octet-stream",
            "attachment",
        ),
        (("pic.html", PICTURE.read_bytes(), "text/html"), "image/png", "inline"),
        (("page.html", b"<script>x</script>", "text/html"), "text/html", "attachment"),
        (("data.csv", b"a,b\n1,2\n", "text/csv\x07"), "text/csv", "attachment"),
    ]
    for part, stored, disposition in cases:
        r = await scene.client.post("/api/files", files={"file": part}, headers=h)
        assert r.status_code == 201, r.text
        assert r.json()["content_type"] == stored, part[0]
        dl = await scene.client.get(f"/api/files/{r.json()['id']}", headers=h)
        assert dl.status_code == 200
        assert dl.content == part[1]
        assert dl.headers["content-type"].split(";")[0] == stored
        assert dl.headers["content-disposition"].startswith(f"{disposition};"), part[0]
        assert dl.headers["x-content-type-options"] == "nosniff"
    # rows stored before types were derived: a control character or a script type never reaches a header
    for bad in ("text/html\x01", "application/javascript", "text/html\r\nX-Evil: 1"):
        fid = uuid.uuid4()
        FileStore(scene.settings.files_dir).path(fid).write_bytes(b"<script>x</script>")
        await scene.pg.execute(
            "INSERT INTO files (id, user_id, name, content_type, size, sha256) VALUES ($1, $2, 'x.html', $3, 18, '')",
            fid,
            scene.user.id,
            bad,
        )
        dl = await scene.client.get(f"/api/files/{fid}", headers=h)
        assert dl.status_code == 200, bad
        assert dl.headers["content-type"] == "application/octet-stream"
        assert dl.headers["content-disposition"].startswith("attachment;")
        assert "x-evil" not in dl.headers
