"""Jobdesk. Importing the package makes structlog load without rich (see :func:`_structlog_without_rich`)."""

import sys

__version__ = "0.1.0"


def _structlog_without_rich() -> None:
    """Import structlog while ``import rich`` fails, unless either is loaded already.

    structlog imports rich (and attrs through it) at import time when it is installed (it comes with
    Litestar), only for its console renderer's default exception formatter and for the locals in its
    dict tracebacks. Jobdesk uses neither: JSON lines format exceptions with ``format_exc_info`` and the
    readable lines with ``plain_traceback`` (:mod:`app.logs`). Loading rich cost every worker, command
    and web process 50-90 ms of its start-up (``python -X importtime``), a tenth of the worker's launch
    to first claim. rich itself stays importable: only structlog's modules saw it missing.
    """
    if "structlog" in sys.modules or "rich" in sys.modules:
        return
    sys.modules["rich"] = None  # type: ignore[assignment]  # the documented way to make an import fail
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]


_structlog_without_rich()
