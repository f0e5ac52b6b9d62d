"""Pictures: ``images.thumbnail`` and ``images.contact_sheet`` on the sample images and
on damaged or wrong files, called directly and through a worker (in its separate CPU process); the
"Photo batch" template end to end through the JSON API, including a batch with a damaged picture."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from app import pipelines
from app.actions import schedules as schedule_actions
from app.errors import BadInput
from app.files import FileStore
from app.jobs import queue
from app.jobs.queue import NewJob
from app.processors import PermanentError, registry
from app.processors.images import make_contact_sheet, make_thumbnails
from tests.support.procs import EXAMPLES, as_dict, cpu_context, enqueue, put_file, upload
from tests.support.webkit import add_token, add_user, app_client
from tests.support.workers import running_worker, wait_status, wait_until

SAMPLES = {
    "rocket.jpg": (640, 427, "JPEG"),
    "chelsea.jpg": (451, 300, "JPEG"),
    "coffee.jpg": (600, 400, "JPEG"),
    "horse.png": (400, 328, "PNG"),
}
DAMAGED = EXAMPLES / "broken" / "damaged-photo.jpg"


def open_result(path: Path) -> Image.Image:
    img = Image.open(path)
    img.load()
    return img


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize(("fmt", "ext"), [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")])
def test_each_sample_in_each_format(tmp_path, name, fmt, ext) -> None:
    width, height, source_format = SAMPLES[name]
    fid = put_file(tmp_path, EXAMPLES / "images" / name)
    with cpu_context(
        "images.thumbnail", {"image": fid, "sizes": [640, 100], "format": fmt, "name": name}, tmp_path
    ) as ctx:
        result = make_thumbnails(ctx)
        assert result.data["source"] == {
            "width": width,
            "height": height,
            "format": source_format,
            "mode": "RGBA" if name.endswith("png") else "RGB",
            "frames": 1,
            "name": name,
        }
        stem = name.rsplit(".", 1)[0]
        assert [f.name for f in result.files] == [f"{stem}-100.{ext}", f"{stem}-640.{ext}"]
        for variant, f in zip(result.data["variants"], result.files, strict=True):
            img = open_result(f.path)
            assert img.format == fmt
            assert f.content_type == f"image/{fmt.lower()}"
            assert max(img.size) == min(variant["size"], max(width, height))  # never enlarged
            assert img.size == (variant["width"], variant["height"])
            assert variant["bytes"] == f.path.stat().st_size
            assert abs(img.width / img.height - width / height) < 0.02  # aspect kept
        assert result.data["variants"][1]["kept_original_size"] is (max(width, height) <= 640)


def test_transparency_is_flattened_for_jpeg_and_kept_for_png_and_webp(tmp_path) -> None:
    img = Image.new("RGBA", (64, 64), (255, 0, 0, 0))
    img.paste((0, 0, 255, 255), (16, 16, 48, 48))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    fid = put_file(tmp_path, data=buf.getvalue())
    for fmt, mode in (("JPEG", "RGB"), ("PNG", "RGBA"), ("WEBP", "RGBA")):
        with cpu_context("images.thumbnail", {"image": fid, "sizes": [32], "format": fmt}, tmp_path) as ctx:
            out = open_result(make_thumbnails(ctx).files[0].path)
            assert out.mode == mode, fmt
            corner = out.getpixel((0, 0))
            if fmt == "JPEG":
                assert min(corner) > 225  # transparent → white, not black
            else:
                assert corner[3] == 0


def test_exif_rotation_is_applied_and_metadata_is_not_copied(tmp_path) -> None:
    img = Image.new("RGB", (200, 100), (10, 120, 200))
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display
    exif[0x010F] = "TestCam"  # Make
    buf = io.BytesIO()
    img.save(buf, "JPEG", exif=exif)
    fid = put_file(tmp_path, data=buf.getvalue())
    with cpu_context("images.thumbnail", {"image": fid, "sizes": [50]}, tmp_path) as ctx:
        result = make_thumbnails(ctx)
        out = open_result(result.files[0].path)
        assert out.size == (25, 50)
        assert result.data["source"]["width"] == 100
        assert not out.getexif()


def test_an_animation_uses_its_first_frame_and_says_so(tmp_path) -> None:
    frames = [Image.new("RGB", (40, 40), c) for c in ((200, 0, 0), (0, 200, 0))]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=100)
    fid = put_file(tmp_path, data=buf.getvalue())
    with cpu_context("images.thumbnail", {"image": fid, "sizes": [20], "format": "PNG"}, tmp_path) as ctx:
        result = make_thumbnails(ctx)
        assert result.data["source"]["frames"] == 2
        assert "first frame" in result.data["note"]
        r, g, _ = open_result(result.files[0].path).convert("RGB").getpixel((10, 10))
        assert r > 150
        assert g < 50


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (DAMAGED.read_bytes(), "is a damaged JPEG file: its image data stops early — the file was cut off"),
        (
            (EXAMPLES / "csv" / "penguins.csv").read_bytes(),
            "is not a picture Jobdesk can read: it is not a JPEG, PNG",
        ),
        (b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n", "It is a PDF document."),
        (b"PK\x03\x04" + bytes(40), "It is a ZIP archive"),
        (b"", "is empty (0 bytes)"),
    ],
    ids=["damaged", "csv", "pdf", "zip", "empty"],
)
def test_a_damaged_or_wrong_file_is_a_permanent_failure_in_plain_words(tmp_path, data, needle) -> None:
    fid = put_file(tmp_path, data=data)
    with cpu_context("images.thumbnail", {"image": fid, "name": "holiday.jpg"}, tmp_path) as ctx:
        with pytest.raises(PermanentError) as err:
            make_thumbnails(ctx)
    assert str(err.value).startswith("The file 'holiday.jpg' ")
    assert needle in str(err.value)


def test_a_huge_picture_is_refused_before_decoding(tmp_path) -> None:
    buf = io.BytesIO()
    Image.new("1", (8000, 8000)).save(buf, "PNG")  # 64 megapixels, a few kB on disk
    fid = put_file(tmp_path, data=buf.getvalue())
    with cpu_context("images.thumbnail", {"image": fid}, tmp_path) as ctx:
        with pytest.raises(PermanentError, match="8000×8000 pixels, more than the 60 megapixels"):
            make_thumbnails(ctx)


def test_a_file_missing_from_storage_says_so(tmp_path) -> None:
    with cpu_context("images.thumbnail", {"image": "0191e0c1-0000-7000-8000-000000000009"}, tmp_path) as ctx:
        with pytest.raises(PermanentError, match="is no longer stored"):
            make_thumbnails(ctx)


@pytest.mark.parametrize(
    ("sizes", "needle"),
    [([8], "between 16 and 4096 pixels (got 8)"), ([5000], "(got 5000)"), ([], "at least 1 item")],
)
def test_sizes_are_checked(sizes, needle) -> None:
    with pytest.raises(BadInput) as err:
        registry.get("images.thumbnail").validate_input(
            {"image": "0191e0c1-0000-7000-8000-000000000009", "sizes": sizes}
        )
    assert needle in err.value.errors["input_data.sizes"]
    ok = registry.get("images.thumbnail").validate_input(
        {"image": "0191e0c1-0000-7000-8000-000000000009", "sizes": [640, 160, 640]}
    )
    assert ok["sizes"] == [160, 640]
    with pytest.raises(BadInput) as err:  # text is no number in JSON: send 640, not "640"
        registry.get("images.thumbnail").validate_input(
            {"image": "0191e0c1-0000-7000-8000-000000000009", "sizes": ["640"]}
        )
    assert err.value.errors == {"input_data.sizes[0]": "Enter a whole number, like 42"}


def test_contact_sheet_of_uploaded_pictures(tmp_path, artifacts_dir) -> None:
    ids = [put_file(tmp_path, EXAMPLES / "images" / n) for n in sorted(SAMPLES)]
    names = dict(zip(ids[1:], sorted(SAMPLES)[1:], strict=True))  # the first one's name is unknown
    with cpu_context(
        "images.contact_sheet",
        {"images": ids, "columns": 3, "cell": 120, "title": "Samples"},
        tmp_path,
        file_names=names,
    ) as ctx:
        result = make_contact_sheet(ctx)
        assert result.data["pictures"] == 4
        assert result.data["rows"] == 2
        assert result.data["columns"] == 3
        sheet = open_result(result.files[0].path)
        assert (
            sheet.size == (result.data["width"], result.data["height"]) == (12 + 3 * 132, 12 + 44 + 2 * 154)
        )
        with zipfile.ZipFile(result.files[1].path) as zf:
            assert zf.namelist() == ["01-Picture-1.jpg", "02-coffee.jpg", "03-horse.jpg", "04-rocket.jpg"]
            assert max(Image.open(zf.open("01-Picture-1.jpg")).size) == 120
        sheet.save(artifacts_dir / "contact-sheet-standalone.png")


def test_contact_sheet_without_pictures_says_what_to_do(tmp_path) -> None:
    with cpu_context("images.contact_sheet", {}, tmp_path) as ctx:
        with pytest.raises(PermanentError, match="no pictures to put on the sheet"):
            make_contact_sheet(ctx)


async def test_thumbnail_job_through_a_worker_stores_files_owned_by_the_user(settings, engine, pg) -> None:
    user = await add_user(settings.database_url, "pics@example.com")
    fid = await upload(engine, settings, user.id, path=EXAMPLES / "images" / "coffee.jpg")
    job = await enqueue(
        engine, settings, user.id, "images.thumbnail", {"image": fid, "sizes": [120], "name": "coffee.jpg"}
    )
    bad = await enqueue(
        engine,
        settings,
        user.id,
        "images.thumbnail",
        {"image": await upload(engine, settings, user.id, path=DAMAGED)},
    )
    async with running_worker(settings):
        done = await wait_status(pg, job, {"completed"}, timeout=60)
        failed = await wait_status(pg, bad, {"failed"}, timeout=60)
    result = as_dict(done["result_data"])
    (ref,) = result["files"]
    assert ref["name"] == "coffee-120.jpg"
    assert ref["content_type"] == "image/jpeg"
    row = await pg.fetchrow("SELECT * FROM files WHERE id = $1::uuid", ref["file_id"])
    assert row["user_id"] == user.id
    assert row["job_id"] == job
    assert row["size"] == ref["size"]
    assert open_result(FileStore(settings.files_dir).path(ref["file_id"])).size == (120, 80)
    assert failed["attempts"] == 1
    assert "The file 'damaged-photo.jpg' is a damaged JPEG file" in failed["error_message"]
    assert "Traceback" not in failed["error_message"]


async def test_a_submission_may_only_name_the_submitters_files(settings, engine, pg) -> None:
    """Case C20 for files: a job (and a template's input) may only name files of its owner — an admin's
    job too — and another user's file gets the same answer as an unknown id. Checked at submission, so
    the mistake is a 422 rather than a failed job; reads are checked again (tests/web/test_file_security.py)."""
    owner = await add_user(settings.database_url, "owner@example.com")
    other = await add_user(settings.database_url, "other@example.com")
    admin = await add_user(settings.database_url, "boss@example.com", admin=True)
    fid = await upload(engine, settings, owner.id, path=EXAMPLES / "images" / "horse.png")
    unknown = "0191e0c1-0000-7000-8000-000000000009"

    async def submit(user: Any, type_: str, data: dict[str, Any]) -> None:
        async with engine.begin() as conn:
            await queue.enqueue(conn, NewJob(type=type_, input_data=data, user_id=user.id), settings)

    for user in (other, admin):
        with pytest.raises(BadInput) as err:
            await submit(user, "images.contact_sheet", {"images": [fid, unknown]})
        assert set(err.value.errors) == {"input_data.images[0]", "input_data.images[1]"}
        assert err.value.errors["input_data.images[0]"].replace(str(fid), "X") == err.value.errors[
            "input_data.images[1]"
        ].replace(unknown, "X")
    with pytest.raises(BadInput) as err:
        await submit(owner, "images.contact_sheet", {"images": [fid, unknown]})
    assert set(err.value.errors) == {"input_data.images[1]"}
    assert "upload it first" in err.value.detail
    with pytest.raises(BadInput) as err:
        await submit(other, "images.thumbnail", {"image": fid})
    assert set(err.value.errors) == {"input_data.image"}
    with pytest.raises(BadInput) as err:
        async with engine.begin() as conn:
            await pipelines.create_from_template(
                conn, "photo_batch", {"images": [fid]}, user_id=other.id, settings=settings
            )
    assert "input_data.images[0]" in err.value.errors
    # a schedule's jobs are submissions of its owner: refused when made or changed, not at each firing
    for target, field in (
        ({"job_type": "images.thumbnail"}, "image"),
        ({"template": "photo_batch"}, "images"),
    ):
        data = {field: fid if field == "image" else [fid]}
        for user in (other, admin):
            async with engine.begin() as conn:
                with pytest.raises(BadInput) as err:
                    await schedule_actions.create_schedule(
                        conn,
                        admin,
                        cron="0 3 * * *",
                        input_data=data,
                        owner_email=user.email,
                        settings=settings,
                        **target,
                    )
            assert (
                "upload it first"
                in err.value.errors[f"input_data.{field}" + ("" if field == "image" else "[0]")]
            )
        async with engine.begin() as conn:
            mine = await schedule_actions.create_schedule(
                conn,
                admin,
                cron="0 3 * * *",
                input_data=data,
                owner_email=owner.email,
                settings=settings,
                **target,
            )
        theirs = await upload(engine, settings, other.id, path=EXAMPLES / "images" / "horse.png")
        async with engine.begin() as conn:
            with pytest.raises(BadInput, match="upload it first"):
                await schedule_actions.update_schedule(
                    conn,
                    admin,
                    mine["id"],
                    cron="0 4 * * *",
                    timezone="UTC",
                    enabled=True,
                    settings=settings,
                    input_data={field: theirs if field == "image" else [theirs]},
                )
    assert await pg.fetchval("SELECT count(*) FROM schedules") == 2
    assert await pg.fetchval("SELECT count(*) FROM schedules WHERE cron <> '0 3 * * *'") == 0
    assert await pg.fetchval("SELECT count(*) FROM jobs") == 0
    await submit(owner, "images.contact_sheet", {"images": [fid]})
    await submit(owner, "images.thumbnail", {"image": fid})


# --- the Photo batch template through the JSON API ------------------------------------------------------


async def _api(db_url: str, email: str):
    user = await add_user(db_url, email)
    return user, {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}


async def test_photo_batch_end_to_end_through_the_api(
    make_settings, db_url, engine, pg, artifacts_dir
) -> None:
    settings = make_settings(worker_enabled=False)
    user, headers = await _api(db_url, "batch@example.com")
    names = ["rocket.jpg", "chelsea.jpg", "coffee.jpg", "horse.png"]
    ids = [await upload(engine, settings, user.id, path=EXAMPLES / "images" / n) for n in names]
    async with app_client(settings) as client:
        catalogue = (await client.get("/api/pipeline-templates", headers=headers)).json()
        assert "photo_batch" in [t["name"] for t in catalogue]
        resp = await client.post(
            "/api/pipelines",
            json={
                "template": "photo_batch",
                "input_data": {"images": ids, "sizes": [96, 240], "title": "Trip"},
            },
            headers=headers,
        )
        assert resp.status_code == 201, resp.text
        pid = resp.json()["id"]
        async with running_worker(settings):
            await wait_until(
                lambda: pg.fetchval(
                    "SELECT status IN ('completed', 'failed') FROM pipelines WHERE id = $1::uuid", pid
                ),
                timeout=90,
                what="the photo batch to finish",
            )
        view = (await client.get(f"/api/pipelines/{pid}", headers=headers)).json()
    steps = {s["key"]: s for s in view["steps"]}
    assert view["status"] == "completed", view
    # One thumbnail step per picture (for_each), no step "thumb" itself.
    assert set(steps) == {"thumb[0]", "thumb[1]", "thumb[2]", "thumb[3]", "sheet"}
    assert all(s["status"] == "completed" for s in steps.values())
    assert sorted(steps["sheet"]["depends_on"]) == ["thumb[0]", "thumb[1]", "thumb[2]", "thumb[3]"]
    sheet = as_dict(
        await pg.fetchval("SELECT result_data FROM jobs WHERE id = $1::uuid", steps["sheet"]["job_id"])
    )
    files = {f["name"]: f for f in sheet["files"]}
    assert set(files) == {"contact-sheet.jpg", "thumbnails.zip"}
    assert sheet["pictures"] == 4
    store = FileStore(settings.files_dir)
    with zipfile.ZipFile(store.path(files["thumbnails.zip"]["file_id"])) as zf:
        assert sorted(zf.namelist()) == sorted(
            f"{n.rsplit('.', 1)[0]}-{s}.jpg" for n in names for s in (96, 240)
        )
    contact = open_result(store.path(files["contact-sheet.jpg"]["file_id"]))
    assert contact.format == "JPEG"
    assert contact.width > 4 * 240
    contact.save(artifacts_dir / "photo-batch-contact-sheet.png")
    owners = await pg.fetch("SELECT DISTINCT user_id FROM files WHERE job_id IS NOT NULL")
    assert [r["user_id"] for r in owners] == [user.id]


async def test_photo_batch_with_a_damaged_picture_fails_that_step_and_cancels_the_sheet(
    make_settings, db_url, engine, pg
) -> None:
    settings = make_settings(worker_enabled=False)
    user, headers = await _api(db_url, "damaged@example.com")
    ids = [
        await upload(engine, settings, user.id, path=EXAMPLES / "images" / "horse.png"),
        await upload(engine, settings, user.id, path=DAMAGED),
    ]
    async with app_client(settings) as client:
        resp = await client.post(
            "/api/pipelines", json={"template": "photo_batch", "input_data": {"images": ids}}, headers=headers
        )
        pid = resp.json()["id"]
        async with running_worker(settings):
            await wait_until(
                lambda: pg.fetchval("SELECT status = 'failed' FROM pipelines WHERE id = $1::uuid", pid),
                timeout=90,
                what="the pipeline to fail",
            )
        view = (await client.get(f"/api/pipelines/{pid}", headers=headers)).json()
    status = {s["key"]: s["status"] for s in view["steps"]}
    assert status == {"thumb[0]": "completed", "thumb[1]": "failed", "sheet": "cancelled"}
    err = await pg.fetchval(
        "SELECT error_message FROM jobs WHERE pipeline_id = $1::uuid AND step_key = 'thumb[1]'", pid
    )
    assert err.startswith("The file 'damaged-photo.jpg' is a damaged JPEG file")


async def test_photo_batch_refuses_pictures_that_are_not_the_users(make_settings, db_url, engine, pg) -> None:
    settings = make_settings(worker_enabled=False)
    owner, _ = await _api(db_url, "owner2@example.com")
    _, headers = await _api(db_url, "snoop@example.com")
    fid = await upload(engine, settings, owner.id, path=EXAMPLES / "images" / "horse.png")
    async with app_client(settings) as client:
        resp = await client.post(
            "/api/pipelines",
            json={"template": "photo_batch", "input_data": {"images": [fid]}},
            headers=headers,
        )
        # Refused at submission: the same answer as for a file that does not exist.
        assert resp.status_code == 422, resp.text
        assert "input_data.images[0]" in resp.json()["errors"]
        assert "no such file" in resp.json()["detail"]
    assert await pg.fetchval("SELECT count(*) FROM pipelines") == 0
