"""Admin actions on schedules: create one, enable or disable it, delete it.

Each action takes ``(db, actor, parameters…)`` — ``db`` an ``AsyncSession`` or ``AsyncConnection``
whose transaction the caller commits, ``actor`` the signed-in user or an
:class:`~app.actions.trail.Actor` — checks that the actor is an admin, makes the change through
:mod:`app.schedules` and writes its audit entry and admin notice (:mod:`app.actions.trail`), all inside
one savepoint. The admin page and the JSON API both call these, so either leaves the same record. A
refusal (a 409, an edited schedule whose target is gone, a 422 naming a field, a 413 of its input, an
unknown schedule) is audited as refused (:func:`app.actions.trail.auditing_refusals`).

A schedule's jobs belong to its owner, so the owner must be allowed to start its target
(:mod:`app.actions.access`): an admin cannot schedule a diagnostic type for a non-admin. The sweep
checks the owner again at each firing (:func:`app.schedules.owner_refusal`).

Errors: :class:`~app.errors.Forbidden` (403), :class:`~app.errors.NotFound` (an unknown schedule, 404),
:class:`~app.errors.Conflict` (409: deleting a schedule defined in code; enabling one whose owner's
account is disabled, which the next firing would disable again; a change that changes nothing — enabling
an enabled schedule, disabling a disabled one, an edit to the values it has — "Nothing changed: …",
nothing written, audited as refused as every admin no-op is), :class:`~app.errors.BadInput`
(422, naming the field: ``cron``, ``timezone``, ``type``, ``template``, ``input_data…``, ``name``,
``owner``; ``type`` or ``template`` also for a target the owner may not start), :class:`~app.errors.TooLarge` (the input is over ``JOB_MAX_INPUT_BYTES``, 413).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy.engine import RowMapping

from app import auth, pipelines, schedules
from app.actions import access
from app.actions.trail import Db, acting, auditing_refusals, record_done, require_admin
from app.emails import email_key
from app.errors import BadInput, Conflict, NotFound
from app.jobs import payload
from app.settings import Settings

CRON_MAX = 300
TIMEZONE_MAX = 100
EMAIL_MAX = 254


def _text(value: Any, field: str, limit: int) -> str:
    """``value`` when it is storable text of at most ``limit`` characters.

    Raises:
        BadInput: not text, too long, or holding a NUL or a lone surrogate (which PostgreSQL text
        cannot store, and which the time-zone lookup rejects with an error of its own).
    """
    if not isinstance(value, str):
        raise BadInput.field(field, "must be text")
    problem = payload.text_problem(value)
    if problem is not None:
        raise BadInput.field(field, problem)
    if len(value) > limit:
        raise BadInput.field(field, f"is {len(value):,} characters long; at most {limit:,} are allowed")
    return value


async def owner_of(db: Db, actor: Any, owner_email: str | None) -> Any:
    """The user a schedule's jobs belong to: ``owner_email``'s account, or the actor when it is empty.

    Raises:
        BadInput: (``owner``) not text, too long, or no such user.
    """
    email = email_key(_text(owner_email or "", "owner", EMAIL_MAX))
    if not email or email == actor.email:
        return actor
    try:
        return await auth.get_user_by_email(db, email)
    except NotFound as exc:
        raise BadInput.field("owner", exc.detail) from None


def _texts(cron: Any, timezone: Any, errors: dict[str, str]) -> tuple[str, str]:
    """The schedule's cron and time zone as storable text; a value that is not text, too long, or holds
    a NUL or a lone surrogate, or an empty time zone, is added to ``errors`` (and given back as ``""``)
    so that the other fields are still checked. The name is checked with the schedule
    (:func:`app.schedules.check_schedule`)."""
    texts: list[str] = []
    for value, key, limit in ((cron, "cron", CRON_MAX), (timezone, "timezone", TIMEZONE_MAX)):
        texts.append(_kept(errors, lambda v=value, k=key, n=limit: _text(v, k, n).strip(), ""))
    if not texts[1] and "timezone" not in errors:
        errors["timezone"] = "Choose a time zone."
    return texts[0], texts[1]


def _kept(errors: dict[str, str], check: Any, default: Any = None) -> Any:
    """``check()``, or ``default`` with its BadInput's fields added to ``errors`` (the first message per
    field wins)."""
    try:
        return check()
    except BadInput as exc:
        for path, message in (exc.errors or {"input_data": exc.detail}).items():
            errors.setdefault(path, message)
        return default


def _raise_all(errors: dict[str, str]) -> None:
    if errors:
        raise BadInput("; ".join(f"{k}: {v}" for k, v in errors.items()), errors=errors)


def _check_target(owner: Any, job_type: str | None, template: str | None) -> None:
    """Raises:
    BadInput: (``type`` or ``template``) the owner may not start the target: a diagnostic or internal
    type, or a template for admins, for an owner who is not an admin. Unknown targets are left to
    :func:`app.schedules.create_schedule`, which names them.
    """
    if job_type is not None:
        access.check_type(owner, job_type)
    elif template is not None:
        tpl = pipelines.get_template(template) if isinstance(template, str) else None
        if tpl is not None:
            access.check_template(owner, tpl)


async def create_schedule(
    db: Db,
    actor: Any,
    *,
    cron: str,
    timezone: str = "UTC",
    job_type: str | None = None,
    template: str | None = None,
    input_data: dict[str, Any] | None = None,
    enabled: bool = True,
    catch_up: bool = False,
    name: str | None = None,
    owner_email: str | None = None,
    settings: Settings,
    ip: str | None = None,
    source: str = "ui",
) -> RowMapping:
    """Create a schedule firing ``job_type`` or ``template`` with ``input_data`` on ``cron`` (read in
    ``timezone``); its jobs belong to ``owner_email``'s account (default: the actor). A taken name is
    refused, never overwritten. ``source`` says where it was made: ``"ui"`` (the admin page) or ``"api"``.
    Returns the schedule row.

    Raises:
        BadInput: every bad field at once (cron, timezone, name, owner, type/template, input_data…).
    """
    require_admin(actor, "create schedules")
    who = acting(actor, ip)
    # The checks are inside the audited block: a bad field, a taken name, an owner who may not start
    # the target are each a refused create, audited as the refusals the change itself meets are.
    async with auditing_refusals(db, who, "schedule.create", target_type="schedule", target_ids=[]):
        errors: dict[str, str] = {}
        cron, timezone = _texts(cron, timezone, errors)
        try:
            owner = await owner_of(db, who.user, owner_email)
        except BadInput as exc:
            errors.update(exc.errors)
            owner = who.user
        _kept(errors, lambda: _check_target(owner, job_type, template))
        _kept(
            errors,
            lambda: schedules.check_schedule(
                cron, timezone, job_type, template, input_data, settings, name=name
            ),
        )
        _raise_all(errors)
        async with db.begin_nested():
            row = await schedules.create_schedule(
                db,
                cron=cron,
                timezone=timezone,
                job_type=job_type,
                template=template,
                input_data=input_data,
                enabled=enabled,
                catch_up=catch_up,
                name=name,
                owner=owner,
                settings=settings,
                source=source,
            )
            await record_done(
                db,
                who,
                "schedule.create",
                target_type="schedule",
                target_ids=[row["id"]],
                detail={
                    "name": row["name"],
                    "cron": row["cron"],
                    "timezone": row["timezone"],
                    "type": job_type,
                    "template": template,
                    "owner": owner.email,
                },
            )
        return row


async def set_enabled(
    db: Db, actor: Any, schedule_id: Any, enabled: bool, *, ip: str | None = None
) -> RowMapping:
    """Enable (the next run is computed from now; missed runs are not back-filled) or disable a schedule.
    Returns the updated row.

    Raises:
        NotFound: unknown id. Conflict: the schedule is already so ("Nothing changed: …", nothing written,
        audited as refused); enabling a schedule whose owner's account is disabled
        (:func:`app.schedules.check_may_enable`).
    """
    require_admin(actor, "enable or disable schedules")
    who = acting(actor, ip)
    action = "schedule.enable" if enabled else "schedule.disable"
    async with auditing_refusals(db, who, action, target_type="schedule", target_ids=[_asked(schedule_id)]):
        # read once, locked until the caller's transaction ends: its id, state and owner as they are once
        # ours to change (the same change sent twice at once then sees the first one's outcome)
        before = await schedules.get_schedule(db, schedule_id, lock=True)
    async with (
        auditing_refusals(db, who, action, target_type="schedule", target_ids=[before["id"]]),
        db.begin_nested(),
    ):
        if before["enabled"] == enabled:
            # a no-op is refused, as every admin action that would change nothing is: its next run and
            # who last changed it stay, and the trail says it was asked and changed nothing
            raise Conflict(
                f"Nothing changed: schedule {before['name']!r} is already "
                + ("enabled." if enabled else "disabled."),
                extra=UNCHANGED,
            )
        row = await schedules.switch_schedule(db, before, enabled)
        await record_done(
            db,
            who,
            action,
            target_type="schedule",
            target_ids=[row["id"]],
            detail={"name": row["name"]},
        )
    return row


async def update_schedule(
    db: Db,
    actor: Any,
    schedule_id: Any,
    *,
    cron: str,
    timezone: str,
    input_data: dict[str, Any] | None,
    enabled: bool,
    settings: Settings,
    ip: str | None = None,
) -> RowMapping:
    """Change a schedule's cron expression, time zone, input and enabled flag (its target, owner and name
    stay); the next run is computed from now. The audit entry names what changed; an edit that only
    switches ``enabled`` is :func:`set_enabled` (``schedule.enable`` / ``schedule.disable``), and one that
    changes more is one ``schedule.update`` whose ``changed`` lists ``enabled`` too. Returns the row.

    Raises:
        NotFound: unknown id. BadInput: each bad field named (cron, timezone, input fields).
        Conflict: an edit that changes nothing (the same values, as they are stored: "Nothing changed:
        …", nothing written, audited as refused); enabling a schedule whose owner's account is disabled; changing a code schedule's
        definition.
    """
    require_admin(actor, "edit schedules")
    who = acting(actor, ip)
    async with auditing_refusals(
        db, who, "schedule.update", target_type="schedule", target_ids=[_asked(schedule_id)]
    ):
        errors: dict[str, str] = {}
        cron, timezone = _texts(cron, timezone, errors)
        _raise_all(errors)
        stored = await schedules.get_schedule(db, schedule_id)
        if _only_switches(stored, cron, timezone, input_data, enabled, settings):
            # One change, one name in the trail: an edit that only turns a schedule on or off is the
            # enable or disable it is (its refusal too), as the Enable/Disable buttons record it.
            return await set_enabled(db, actor, stored["id"], enabled, ip=ip)
    sid = stored["id"]
    async with (
        auditing_refusals(db, who, "schedule.update", target_type="schedule", target_ids=[sid]),
        db.begin_nested(),
    ):
        before, row = await schedules.update_schedule(
            db,
            schedule_id,
            cron=cron,
            timezone=timezone,
            input_data=input_data if input_data is not None else {},
            enabled=enabled,
            settings=settings,
        )
        changed = [k for k in ("cron", "timezone", "input_data", "enabled") if before[k] != row[k]]
        if not changed:
            raise Conflict(
                f"Nothing changed: schedule {row['name']!r} already has this cron expression, time zone, "
                "input and enabled flag.",
                extra=UNCHANGED,
            )
        switched = "schedule.enable" if row["enabled"] else "schedule.disable"
        await record_done(
            db,
            who,
            switched if changed == ["enabled"] else "schedule.update",
            target_type="schedule",
            target_ids=[row["id"]],
            detail={
                "name": row["name"],
                "changed": changed,
                "cron": row["cron"],
                "timezone": row["timezone"],
            },
        )
    return row


def _only_switches(
    stored: Any,
    cron: str,
    timezone: str,
    input_data: dict[str, Any] | None,
    enabled: bool,
    settings: Settings,
) -> bool:
    """Whether an edit changes the enabled flag and nothing else, its values read as the schedule would
    store them (a form sends every field, defaults included).

    Raises:
        BadInput: a bad cron expression, zone or input (:func:`app.schedules.check_schedule`).
    """
    if stored["enabled"] == enabled:
        return False
    cron, values = schedules.check_schedule(
        cron,
        timezone,
        stored["job_type"],
        stored["template"],
        input_data if input_data is not None else {},
        settings,
    )
    as_stored = json.loads(payload.json_text(values))
    return (cron, timezone, as_stored) == (stored["cron"], stored["timezone"], stored["input_data"])


CHANGEABLE = ("cron", "timezone", "input_data", "enabled")
"""The fields of a schedule an edit may change (its target, owner and name stay)."""


async def change_schedule(
    db: Db,
    actor: Any,
    schedule_id: Any,
    changes: Mapping[str, Any],
    *,
    settings: Settings,
    ip: str | None = None,
) -> RowMapping:
    """A partial edit (the API's ``PATCH`` and ``PUT``): each field of :data:`CHANGEABLE` in
    ``changes`` replaces the stored value and one left out keeps it, through :func:`update_schedule`.
    A field given as ``None`` (JSON ``null``) is refused, not read as "left out": ``{"cron": null}``
    answered 200 and changed nothing, and a schedule has no "no cron" to set.

    Raises:
        BadInput: each field given as ``None`` named, then as :func:`update_schedule`. Conflict: no field
        of :data:`CHANGEABLE` is given ("Nothing changed: …", audited as refused), or the values given
        are the schedule's already (:func:`update_schedule`).
    """
    require_admin(actor, "edit schedules")
    who = acting(actor, ip)
    async with auditing_refusals(
        db, who, "schedule.update", target_type="schedule", target_ids=[_asked(schedule_id)]
    ):
        _raise_all(
            {
                k: f"cannot be null: give a new value, or leave {k} out to keep the current one"
                for k in CHANGEABLE
                if k in changes and changes[k] is None
            }
        )
        row = await schedules.get_schedule(db, schedule_id)
        if not any(k in changes for k in CHANGEABLE):
            raise Conflict(
                f"Nothing changed: the request gives no field to change in schedule {row['name']!r}; "
                "send cron, timezone, input_data or enabled.",
                extra=UNCHANGED,
            )
    kept = {k: changes[k] if k in changes else row[k] for k in CHANGEABLE}
    return await update_schedule(db, actor, schedule_id, **kept, settings=settings, ip=ip)


UNCHANGED = {"unchanged": True}
"""The ``extra`` of the 409 of a change that would change nothing (:func:`unchanged`)."""


def unchanged(exc: Conflict) -> bool:
    """Whether ``exc`` refused a change that would have changed nothing ("Nothing changed: …"), not one
    that cannot be made (a schedule defined in code, an owner whose account is disabled)."""
    return bool(exc.extra.get("unchanged"))


def _asked(schedule_id: Any) -> str:
    """The schedule id an admin asked for, as a refusal's entry names it (it may name no schedule)."""
    return str(schedule_id)[:100]


async def delete_schedule(db: Db, actor: Any, schedule_id: Any, *, ip: str | None = None) -> RowMapping:
    """Delete a schedule made in the console or the API (the jobs it started stay); returns the deleted
    row. One defined in code is refused with Conflict: the next worker start would create it again."""
    require_admin(actor, "delete schedules")
    who = acting(actor, ip)
    async with (
        auditing_refusals(
            db, who, "schedule.delete", target_type="schedule", target_ids=[_asked(schedule_id)]
        ),
        db.begin_nested(),
    ):
        row = await schedules.delete_schedule(db, schedule_id)
        await record_done(
            db,
            who,
            "schedule.delete",
            target_type="schedule",
            target_ids=[row["id"]],
            detail={"name": row["name"]},
        )
    return row
