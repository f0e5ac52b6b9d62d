"""Probes: ``GET /healthz`` (liveness) and ``GET /readyz`` (readiness).

No ``from __future__ import annotations`` here: Litestar reads handler signatures at runtime.
"""

import asyncio
from typing import Any

from litestar import Controller, MediaType, Request, Response, get

from app.db import current_revision, describe_url

#: Seconds /readyz waits for the database before answering 503.
READY_TIMEOUT = 3.0


async def readiness(state: Any) -> tuple[bool, dict[str, str]]:
    """``(ready, checks)``: the database answers, its schema is at this version's newest migration, and
    the in-app worker (when ``WORKER_ENABLED``) is running, has started, has all its side tasks and has
    written its heartbeat recently (:meth:`app.worker.runner.Worker.health`). ``checks``
    maps each check to ``ok`` or the reason it failed."""
    checks: dict[str, str] = {}
    ready = True
    try:
        async with asyncio.timeout(READY_TIMEOUT):
            revision = await current_revision(state.engine)
        checks["database"] = "ok"
        head = state.head_revision
        if revision == head:
            checks["migrations"] = "ok"
        else:
            ready = False
            checks["migrations"] = (
                "the database has no Jobdesk schema: run `jobdesk migrate`"
                if revision is None
                else f"the schema is at {revision} but this version needs {head}: run `jobdesk migrate`"
            )
    except Exception as exc:  # any failure to ask is "not ready", with the reason
        ready = False
        checks["database"] = f"unreachable ({describe_url(str(state.engine.url))}): {_reason(exc)}"
    task = state.get("worker_task")
    if task is not None:
        health = getattr(state.get("worker"), "health", None)
        problem = health() if callable(health) else None
        if task.done():
            ready = False
            checks["worker"] = "the in-app worker has stopped"
        elif problem:
            ready = False
            checks["worker"] = f"the in-app worker is not working: {problem}"
        else:
            checks["worker"] = "ok"
    return ready, checks


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {READY_TIMEOUT:.0f} s"
    orig = getattr(exc, "orig", None) or exc
    lines = str(orig).strip().splitlines()
    return lines[0][:300] if lines else type(orig).__name__


class HealthController(Controller):
    """Probes for load balancers and orchestrators; no sign-in, no CSRF, no session."""

    tags = ["health"]

    @get("/healthz", name="health.live", media_type=MediaType.JSON)
    async def healthz(self) -> dict[str, str]:
        """200 ``{"status": "ok"}`` while the process serves requests."""
        return {"status": "ok"}

    @get("/readyz", name="health.ready", media_type=MediaType.JSON)
    async def readyz(self, request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
        """200 ``{"status": "ready", "checks": …}``, or 503 ``{"status": "unavailable", "detail": …}``
        naming what failed (database unreachable, migrations behind, worker stopped)."""
        ready, checks = await readiness(request.app.state)
        if ready:
            return Response({"status": "ready", "checks": checks}, status_code=200)
        detail = "; ".join(f"{name}: {value}" for name, value in checks.items() if value != "ok")
        return Response({"status": "unavailable", "detail": detail, "checks": checks}, status_code=503)
