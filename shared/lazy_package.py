"""Import a package's submodules without running its ``__init__`` until one of its own names
is used.

``prometheus_client/__init__.py`` imports its exposition half (``http.server``,
``urllib.request``, ``wsgiref``, the gzip and OpenMetrics writers) so that
``from prometheus_client import start_http_server`` works. A worker process only records
values (``prometheus_client.metrics``, ``values``, ``mmap_dict``: about 0.5 MiB); the
exposition half is 1.7 MiB more of resident memory in every worker process and is used only
by the process that serves ``/metrics``.

:func:`defer_init` registers the package in ``sys.modules`` as a module with the package's own
spec and ``__path__`` whose body has not run yet:

- importing a submodule (``import pkg.sub``, ``from pkg import sub``, ``from .sub import x``
  inside the package) loads that submodule only, as a real package would;
- reading any other name (``pkg.Counter``, ``from pkg import generate_latest``) runs the
  package's ``__init__`` once, in that same module object, and then answers as the real
  package does: afterwards the module is indistinguishable from a normally imported one.

A package that is already imported is left as it is.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
from collections.abc import Callable
from types import ModuleType

_lock = threading.RLock()


def defer_init(name: str) -> ModuleType:
    """``sys.modules[name]``: the package, with its ``__init__`` deferred if it was not
    imported yet."""
    with _lock:
        existing = sys.modules.get(name)
        if existing is not None:
            return existing
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or spec.submodule_search_locations is None:
            raise ImportError(f"{name} is not an importable package")
        module = importlib.util.module_from_spec(spec)
        module.__getattr__ = _on_missing_name(module, spec)  # type: ignore[method-assign]
        sys.modules[name] = module
        return module


def _on_missing_name(
    module: ModuleType, spec: importlib.machinery.ModuleSpec
) -> Callable[[str], object]:
    """The module's ``__getattr__`` (PEP 562), called only for names it does not hold yet.
    It stays in place while the package's ``__init__`` runs, so a thread asking for a name
    meanwhile waits for the ``__init__`` to finish instead of finding the name missing."""
    search_path = list(spec.submodule_search_locations or [])
    progress = {"running": False, "done": False}

    def missing(attribute: str) -> object:
        if not attribute.startswith("__") and _is_submodule(attribute, search_path):
            return importlib.import_module(f"{spec.name}.{attribute}")
        with _lock:
            # The thread running __init__ re-enters here for a name __init__ has not set
            # yet: that is a missing name, as in any module still being imported.
            if not progress["done"] and not progress["running"]:
                progress["running"] = True
                try:
                    _run_init(module, spec)
                finally:
                    progress["running"] = False
                progress["done"] = True
                if module.__dict__.get("__getattr__") is missing:
                    del module.__dict__["__getattr__"]  # the package is whole: no hook left
        try:
            return module.__dict__[attribute]
        except KeyError:
            raise AttributeError(f"module {spec.name!r} has no attribute {attribute!r}") from None

    return missing


def _is_submodule(attribute: str, search_path: list[str]) -> bool:
    return importlib.machinery.PathFinder.find_spec(attribute, search_path) is not None


def _run_init(module: ModuleType, spec: importlib.machinery.ModuleSpec) -> None:
    """Run the package's ``__init__`` in ``module``; if it fails, the package is dropped from
    ``sys.modules`` (the next import starts afresh, as after any failed import)."""
    assert spec.loader is not None
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(spec.name, None)
        raise
