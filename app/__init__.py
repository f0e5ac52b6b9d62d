"""Jobdesk. Importing the package sets up one import hook: structlog is loaded without rich (see
:class:`_StructlogWithoutRich`)."""

import sys
from typing import Any

__version__ = "0.1.0"


class _StructlogWithoutRich:
    """Import hook: structlog, when it is first imported, runs its imports as if rich were not installed.

    structlog imports rich (and attrs through it) when it is installed (it comes with Litestar), only for
    its console renderer's default exception formatter and for the locals in its dict tracebacks. Jobdesk
    uses neither: JSON lines format exceptions with ``format_exc_info`` and the readable lines with
    ``plain_traceback`` (:mod:`app.logs`). Loading rich cost every worker, command and web process 50-90
    ms of its start (``python -X importtime``), a tenth of the worker's launch to first claim. A hook
    rather than an import here, so that what imports ``app`` without logging (``jobdesk --help``, the CPU
    processors' forkserver) does not load structlog at all. rich itself stays importable: only
    structlog's own modules see it missing, and the hook leaves ``sys.meta_path`` at its first use.
    """

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "structlog":
            return None
        sys.meta_path.remove(cls)
        if "rich" in sys.modules:  # loaded already: hiding it would save nothing
            return None
        from importlib.util import find_spec

        spec = find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderWithoutRich(spec.loader)  # type: ignore[assignment]
        return spec


class _LoaderWithoutRich:
    """Runs a module with ``import rich`` failing (``None`` in ``sys.modules`` is the documented way)."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        sys.modules["rich"] = None  # type: ignore[assignment]
        try:
            self._loader.exec_module(module)
        finally:
            if "rich" in sys.modules and sys.modules["rich"] is None:
                del sys.modules["rich"]


if "structlog" not in sys.modules:
    sys.meta_path.insert(0, _StructlogWithoutRich)
