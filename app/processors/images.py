"""Pictures: ``images.thumbnail`` (resized variants of one upload), ``images.batch`` (the
fan-out step of the "Photo batch" pipeline, :mod:`app.processors.pipeline_templates`) and
``images.contact_sheet`` (its fan-in: one sheet of all thumbnails and a zip of them), with Pillow.

The Pillow work is CPU-bound and runs in a separate process (``cpu_bound=True``; the functions are
module-level so the worker can start them by name; this module imports nothing heavy, as each such
process imports it anew). A file that is not a picture, or whose image data is
damaged, is a permanent failure that says which and why — retrying cannot repair a file.

A CPU-bound step reads only the files the worker resolved for the job's owner (``ctx.files``, through
:func:`~app.processors.inputs.stored_file`): a file id in the input or in a parent's result that is
not one of them fails the job, whoever wrote it there. Names of zip members are plain file names.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from app.processors import (
    PICTURES,
    CpuContext,
    FileId,
    FileIds,
    Input,
    JobContext,
    NextJob,
    OutputFile,
    PermanentError,
    Result,
    processor,
)
from app.processors.inputs import describe_bytes, invalid, stored_file

READABLE = {
    "JPEG": "JPEG",
    "MPO": "JPEG",
    "PNG": "PNG",
    "GIF": "GIF",
    "WEBP": "WebP",
    "BMP": "BMP",
    "TIFF": "TIFF",
}
"""Formats Pillow reads that we accept (MPO is the multi-picture JPEG some cameras write)."""
OUTPUT = {"JPEG": ("jpg", "image/jpeg"), "PNG": ("png", "image/png"), "WEBP": ("webp", "image/webp")}
MAX_PIXELS = 60_000_000
"""Largest picture accepted (60 megapixels): bigger ones would take gigabytes of memory."""
MIN_SIZE, MAX_SIZE = 16, 4096
READ_HINT = "JPEG, PNG, GIF, WebP, BMP or TIFF"


# --- shared picture handling ----------------------------------------------------------------------


def open_image(path: Path, label: str) -> tuple[Any, str, int]:
    """Open and fully decode the picture at ``path`` (``label`` names it in messages). Returns
    ``(image, format name, frames)``: EXIF rotation applied, first frame of an animation.

    Raises:
        PermanentError: not a picture (saying what it is when known), a format we do not read, more than
            :data:`MAX_PIXELS`, or damaged/cut-off image data.
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        img = Image.open(path)
    except UnidentifiedImageError:
        with open(path, "rb") as fh:
            head = fh.read(64)
        what = describe_bytes(head)
        if not head:
            raise PermanentError(f"{label} is empty (0 bytes): upload the picture again.") from None
        found = f" It is {what}." if what else ""
        raise PermanentError(
            f"{label} is not a picture Jobdesk can read: it is not a {READ_HINT} image.{found}"
        ) from None
    except Image.DecompressionBombError:
        raise PermanentError(
            f"{label} is too large to process safely (more than {MAX_PIXELS // 1_000_000} megapixels)."
        ) from None
    if img.format not in READABLE:
        raise PermanentError(
            f"{label} is a {img.format} picture; Jobdesk makes thumbnails of {READ_HINT} pictures."
        )
    width, height = img.size
    if width * height > MAX_PIXELS:
        raise PermanentError(
            f"{label} is {width}×{height} pixels, more than the {MAX_PIXELS // 1_000_000} megapixels "
            "Jobdesk processes; make it smaller first."
        )
    try:
        img.seek(0)
        img.load()
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        text = str(exc)
        if "truncated" in text or isinstance(exc, EOFError):
            why = "its image data stops early — the file was cut off (an incomplete upload or copy)"
        else:
            why = f"its image data is damaged ({text})"
        raise PermanentError(
            f"{label} is a damaged {READABLE[img.format]} file: {why}. Upload the original picture again."
        ) from None
    fmt, frames = READABLE[img.format], int(getattr(img, "n_frames", 1) or 1)
    upright: Any = img
    try:
        upright = ImageOps.exif_transpose(img) or img
    except Exception:  # a broken EXIF block only loses the rotation, never the picture
        pass
    return upright, fmt, frames


def normalized(img: Any) -> Any:
    """``img`` in a mode that resizes well: RGB/RGBA/L/LA (palettes, 1-bit, CMYK and 16-bit converted)."""
    if img.mode in ("RGB", "RGBA", "L", "LA"):
        return img
    if img.mode == "P" or "transparency" in img.info:
        return img.convert("RGBA")
    if img.mode == "1":
        return img.convert("L")
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        return img.convert("I").point(lambda v: v * (1 / 256)).convert("L")
    return img.convert("RGB")


def for_format(img: Any, fmt: str, background: tuple[int, int, int] = (255, 255, 255)) -> Any:
    """``img`` converted to a mode ``fmt`` can store (JPEG has no transparency: laid on ``background``)."""
    from PIL import Image

    if fmt == "JPEG":
        if img.mode in ("RGBA", "LA"):
            rgba = img.convert("RGBA")
            flat = Image.new("RGB", rgba.size, background)
            flat.paste(rgba, mask=rgba.getchannel("A"))
            return flat
        return img if img.mode in ("RGB", "L") else img.convert("RGB")
    if fmt == "WEBP":
        if img.mode == "LA":
            return img.convert("RGBA")
        return img if img.mode in ("RGB", "RGBA") else img.convert("RGB")
    return img


def save_image(img: Any, path: Path, fmt: str, quality: int) -> None:
    options: dict[str, Any] = {}
    if fmt == "JPEG":
        options = {"quality": quality, "optimize": True, "progressive": True}
    elif fmt == "WEBP":
        options = {"quality": quality, "method": 4}
    elif fmt == "PNG":
        options = {"optimize": True}
    for_format(img, fmt).save(path, fmt, **options)


def safe_stem(name: str, fallback: str = "thumbnail") -> str:
    """A file-name stem made of letters, digits, ``-``, ``_`` and ``.`` (``"My photo.JPG"`` → ``"My-photo"``)."""
    stem = name.rsplit(".", 1)[0] if "." in name[1:] else name
    stem = re.sub(r"[^\w.-]+", "-", stem, flags=re.ASCII).strip("-.")
    return stem[:80] or fallback


# --- images.thumbnail ----------------------------------------------------------------------------


def _check_sizes(value: list[int]) -> list[int]:
    for v in value:
        if not MIN_SIZE <= v <= MAX_SIZE:
            raise invalid(f"each size must be between {MIN_SIZE} and {MAX_SIZE} pixels (got {v})")
    return sorted(set(value))


FORMAT_LABELS: dict[str, Any] = {"x-labels": {"JPEG": "JPEG", "PNG": "PNG", "WEBP": "WebP"}}
"""The picture formats in words (the values stay as the API takes them)."""


class ThumbnailInput(Input):
    """Input of ``images.thumbnail``."""

    image: FileId = Field(title="Picture", description=f"A {READ_HINT} picture.", json_schema_extra=PICTURES)
    sizes: list[int] = Field(
        default_factory=lambda: [160, 640],
        min_length=1,
        max_length=8,
        title="Sizes (pixels)",
        description="The longest side of each variant, e.g. 160 and 640. Small pictures are never enlarged.",
    )
    format: Literal["JPEG", "PNG", "WEBP"] = Field(
        "JPEG",
        title="Format",
        description="JPEG for photos; PNG keeps transparency; WebP is smallest.",
        json_schema_extra=FORMAT_LABELS,
    )
    quality: int = Field(85, ge=1, le=100, title="Quality", description="1–100, for JPEG and WebP.")
    name: str = Field(
        "",
        max_length=120,
        title="Name for the results",
        description="For example holiday gives holiday-160.jpg. Empty: the picture's own name "
        "(holiday.png gives holiday-160.jpg).",
    )

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value: list[int]) -> list[int]:
        return _check_sizes(value)


def make_thumbnails(ctx: CpuContext) -> Result:
    """Resize ``ctx.input.image`` to each size (longest side, aspect kept, never enlarged); metadata such
    as EXIF location is not copied. ``result_data``: ``{source: {width, height, format, mode, frames},
    format, variants: [{size, width, height, name, bytes, enlarged: false}], files}``.

    Raises:
        PermanentError: see :func:`open_image`; the file is gone from storage.
    """
    from PIL import Image

    inp: ThumbnailInput = ctx.input
    # A picture's own name tells the thumbnails of a batch apart (one step per picture gives no name).
    picture = inp.name or ctx.file_names.get(str(inp.image)) or ""
    base = safe_stem(picture) if picture else "thumbnail"
    path = stored_file(ctx, inp.image, "picture")
    label = f"The file {picture!r}" if picture else "The uploaded file"
    img, fmt, frames = open_image(path, label)
    source = {"width": img.width, "height": img.height, "format": fmt, "mode": img.mode, "frames": frames}
    img = normalized(img)
    ext, content_type = OUTPUT[inp.format]
    files: list[OutputFile] = []
    variants = []
    for size in inp.sizes:
        variant = img.copy()
        variant.thumbnail((size, size), Image.Resampling.LANCZOS)
        name = f"{base}-{size}.{ext}"
        out = Path(ctx.output_dir) / name
        save_image(variant, out, inp.format, inp.quality)
        files.append(OutputFile(out, name, content_type))
        variants.append(
            {
                "size": size,
                "width": variant.width,
                "height": variant.height,
                "name": name,
                "bytes": out.stat().st_size,
                "kept_original_size": max(img.width, img.height) <= size,
            }
        )
    data: dict[str, Any] = {"source": source, "format": inp.format, "variants": variants}
    if picture:
        data["source"]["name"] = picture
    if source["frames"] > 1:
        data["note"] = "The picture is animated: the first frame was used."
    return Result(data=data, files=files)


processor(
    "images.thumbnail",
    title="Make thumbnails of a picture",
    description="Resizes an uploaded picture to one or more sizes, as JPEG, PNG or WebP files to download.",
    input=ThumbnailInput,
    cpu_bound=True,
    timeout=300,
    max_attempts=3,
    group="Pictures",
)(make_thumbnails)


# --- images.contact_sheet ---------------------------------------------------------------------------


class ContactSheetInput(Input):
    """Input of ``images.contact_sheet``."""

    images: FileIds = Field(
        default_factory=list,
        max_length=100,
        title="Pictures",
        description="The pictures to put on the sheet. As a pipeline step after thumbnail steps it may "
        "be left empty: the sheet then shows the thumbnails those steps made.",
        json_schema_extra=PICTURES,
    )
    columns: int = Field(4, ge=1, le=10, title="Pictures per row")
    cell: int = Field(240, ge=64, le=600, title="Picture size on the sheet (pixels)")
    title: str = Field("", max_length=120, title="Title", description="Printed at the top of the sheet.")


def pictures_given(data: dict[str, Any], has_parents: bool) -> dict[str, str]:
    """At submission: a sheet with no pictures chosen is refused unless the job is a pipeline step after
    others, whose thumbnails it shows; a job on its own would only fail when it runs. Pictures still to
    come from a parent's result (a ``$ref``) count as given."""
    if has_parents or data.get("images", []) != []:
        return {}
    return {"images": "choose at least one picture to put on the sheet"}


def _natural(key: str) -> list[Any]:
    """``key`` split into text and runs of digits (every other part), the runs compared as numbers: by
    their length without leading zeros, then their digits. Not ``int``: a name is anyone's text, and
    ``int`` refuses more than 4,300 digits."""
    parts = re.split(r"([0-9]+)", key)
    return [(len(p.lstrip("0")), p.lstrip("0")) if i % 2 else p for i, p in enumerate(parts)]


def _sheet_sources(ctx: CpuContext) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
    """``(tiles, zip members)``: each as ``(label or name, path)``. From the parents' thumbnails in a
    pipeline (the largest variant on the sheet, every variant in the zip), then any ``images`` given.
    Each file is one the worker resolved for the job's owner; a member is named by its stored name.

    Raises:
        PermanentError: a parent's result or the input names a file that is not the owner's.
    """
    tiles: list[tuple[str, Path]] = []
    members: list[tuple[str, Path]] = []
    for key in sorted(ctx.parents, key=_natural):
        result = ctx.parents[key] if isinstance(ctx.parents[key], dict) else {}
        refs = [f for f in result.get("files") or [] if isinstance(f, dict) and f.get("file_id")]
        if not refs:
            continue
        sizes = {v.get("name"): v.get("size", 0) for v in result.get("variants") or [] if isinstance(v, dict)}
        biggest = max(refs, key=lambda f: (_number(sizes.get(f.get("name"))), _number(f.get("size"))))
        source = result.get("source")
        label = (source.get("name") if isinstance(source, dict) else None) or biggest.get("name") or key
        tiles.append((str(label), stored_file(ctx, str(biggest["file_id"]), "thumbnail")))
        for f in refs:
            path = stored_file(ctx, str(f["file_id"]), "thumbnail")
            members.append((ctx.file_names.get(str(f["file_id"])) or path.name, path))
    for i, fid in enumerate(ctx.input.images, start=1):
        name = ctx.file_names.get(str(fid)) or f"Picture {i}"
        tiles.append((name, stored_file(ctx, fid, "picture")))
    return tiles, members


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def member_name(name: str, fallback: str = "file") -> str:
    """``name`` as a plain file name for an archive member: its last path part, without control or
    reserved characters and leading dots, so no member is a folder, a ``..`` or an absolute path."""
    base = str(name).replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(ch for ch in base if ch.isprintable() and ch not in '"<>|:*?').strip().lstrip(".").strip()
    return base[:120] or fallback


def unique_name(name: str, used: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3``… (before the extension) if one of ``used`` already has it
    (compared without case, as many unzip tools do); adds the answer to ``used``."""
    taken = {u.lower() for u in used}
    candidate, n = name, 1
    stem, dot, ext = name.rpartition(".")
    while candidate.lower() in taken:
        n += 1
        candidate = f"{stem}-{n}.{ext}" if dot and stem else f"{name}-{n}"
    used.add(candidate)
    return candidate


def _fit(text: str, font: Any, draw: Any, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow built without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _zip_pictures(zip_path: Path, entries: list[tuple[str, Path]]) -> set[str]:
    """Write ``(name, path)`` pictures into ``zip_path`` under safe, unique member names; returns them."""
    used: set[str] = set()
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, path in entries:
            zf.write(path, unique_name(member_name(name, "picture.jpg"), used))
    return used


def make_contact_sheet(ctx: CpuContext) -> Result:
    """Lay the pictures out in a grid (``columns`` per row, each fitted into ``cell``×``cell`` with its
    name under it) → ``contact-sheet.jpg``, and put every thumbnail in ``thumbnails.zip`` (standalone:
    the fitted pictures). ``result_data``: ``{pictures, columns, rows, width, height, zip_members}``.

    Raises:
        PermanentError: no pictures at all; a picture that cannot be read (see :func:`open_image`).
    """
    from PIL import Image, ImageDraw

    # Long because the layout arithmetic and the drawing share every measure; split, they would pass a
    # dozen values back and forth.
    inp: ContactSheetInput = ctx.input
    tiles, members = _sheet_sources(ctx)
    if not tiles:
        # Refused at submission unless the job has parents (pictures_given): here the steps before it
        # made no thumbnails.
        raise PermanentError(
            "There are no pictures to put on the sheet: none were chosen, and the steps before this one "
            "made no thumbnails."
        )
    cell, pad, label_h = inp.cell, 12, 22
    title_h = 44 if inp.title else 0
    columns = min(inp.columns, len(tiles))
    rows = -(-len(tiles) // columns)
    width = pad + columns * (cell + pad)
    height = pad + title_h + rows * (cell + label_h + pad)
    sheet = Image.new("RGB", (width, height), (250, 250, 248))
    draw = ImageDraw.Draw(sheet)
    label_font, title_font = _font(13), _font(22)
    if inp.title:
        draw.text(
            (pad, pad + 6),
            _fit(inp.title, title_font, draw, width - 2 * pad),
            fill=(20, 20, 20),
            font=title_font,
        )
    out_dir = Path(ctx.output_dir)
    fitted: list[tuple[str, Path]] = []
    for i, (label, path) in enumerate(tiles):
        img = for_format(normalized(open_image(path, f"The picture {label!r}")[0]), "JPEG", (250, 250, 248))
        img.thumbnail((cell, cell), Image.Resampling.LANCZOS)
        col, row = i % columns, i // columns
        x = pad + col * (cell + pad)
        y = pad + title_h + row * (cell + label_h + pad)
        sheet.paste(img, (x + (cell - img.width) // 2, y + cell - img.height))  # on the label line
        draw.text((x, y + cell + 4), _fit(label, label_font, draw, cell), fill=(60, 60, 60), font=label_font)
        if not members:
            tile_path = out_dir / f"tile-{i + 1:02d}.jpg"
            save_image(img, tile_path, "JPEG", 85)
            fitted.append((f"{i + 1:02d}-{safe_stem(label, 'picture')}.jpg", tile_path))
    sheet_path = out_dir / "contact-sheet.jpg"
    save_image(sheet, sheet_path, "JPEG", 88)
    zip_path = out_dir / "thumbnails.zip"
    used = _zip_pictures(zip_path, members or fitted)
    for _, tile_path in fitted:
        tile_path.unlink(missing_ok=True)
    return Result(
        data={
            "pictures": len(tiles),
            "columns": columns,
            "rows": rows,
            "width": width,
            "height": height,
            "zip_members": sorted(used),
        },
        files=[
            OutputFile(sheet_path, "contact-sheet.jpg", "image/jpeg"),
            OutputFile(zip_path, "thumbnails.zip", "application/zip"),
        ],
    )


processor(
    "images.contact_sheet",
    title="Make a contact sheet",
    description="Puts pictures side by side on one sheet with their names, and zips them for download.",
    input=ContactSheetInput,
    submit_check=pictures_given,
    cpu_bound=True,
    timeout=300,
    max_attempts=3,
    group="Pictures",
)(make_contact_sheet)


# --- images.batch: the fan-out step of the Photo batch pipeline ------------------------------------------------------


class PhotoBatchInput(Input):
    """Input of ``images.batch`` and of the "Photo batch" pipeline."""

    images: FileIds = Field(
        min_length=1,
        max_length=50,
        title="Pictures",
        description=f"Up to 50 {READ_HINT} pictures.",
        json_schema_extra=PICTURES,
    )
    sizes: list[int] = Field(
        default_factory=lambda: [160, 640],
        min_length=1,
        max_length=8,
        title="Thumbnail sizes (pixels)",
        description="The longest side of each variant.",
    )
    format: Literal["JPEG", "PNG", "WEBP"] = Field("JPEG", title="Format", json_schema_extra=FORMAT_LABELS)
    columns: int = Field(4, ge=1, le=10, title="Pictures per row on the contact sheet")
    title: str = Field("", max_length=120, title="Title of the contact sheet")

    @field_validator("sizes")
    @classmethod
    def _sizes(cls, value: list[int]) -> list[int]:
        return _check_sizes(value)


@processor(
    "images.batch",
    title="Plan a photo batch",
    description="The first step of the Photo batch pipeline: one thumbnail job per picture, in parallel, "
    "then a contact sheet and a zip of all thumbnails.",
    input=PhotoBatchInput,
    group="Pipeline steps",
    diagnostic=True,
)
async def plan_photo_batch(ctx: JobContext[PhotoBatchInput]) -> Result:
    """Fan out: check each picture exists and belongs to the job's owner, then return one
    ``images.thumbnail`` next job per picture (keys ``thumb-1``…) and an ``images.contact_sheet`` job
    (key ``sheet``) that depends on all of them.

    Raises:
        PermanentError: a picture that does not exist or is not the owner's.
    """
    inp = ctx.input
    names: list[str] = []
    for i, fid in enumerate(inp.images, start=1):
        info = await ctx.files.info(fid)
        names.append(info["name"])
        await ctx.report_progress(i / (len(inp.images) + 1), f"Found {info['name']}")
    keys = [f"thumb-{i}" for i in range(1, len(names) + 1)]
    thumbs = [
        NextJob(
            type="images.thumbnail",
            input_data={"image": str(fid), "sizes": inp.sizes, "format": inp.format, "name": name},
            key=key,
            title=f"Thumbnails of {name}",
        )
        for key, fid, name in zip(keys, inp.images, names, strict=True)
    ]
    sheet = NextJob(
        type="images.contact_sheet",
        input_data={"columns": inp.columns, "title": inp.title or f"{len(names)} pictures"},
        key="sheet",
        depends_on=list(keys),
        title="Contact sheet and zip of all thumbnails",
    )
    await ctx.report_progress(1.0, f"Planned {len(names)} thumbnail jobs and a contact sheet")
    return Result(
        data={"pictures": len(names), "names": names, "steps": [*keys, "sheet"]}, next_jobs=[*thumbs, sheet]
    )
