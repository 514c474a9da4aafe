"""What a product builds at its first use rather than at bootstrap: its actors and the
contexts behind them (connectors, the indexing kernel, HTTP clients), with the modules they
import (the ORM models among them), which a worker needs for none of its families' routing,
only to run their handlers.

===============================  ==============================================================
process                          when a deferred part is built
===============================  ==============================================================
API, scheduler, CLI, tests       at bootstrap, before it returns, as if it were not deferred
                                 (``services.app.bootstrap.bootstrap``, ``defer=False``)
worker (``speedtier worker``)    once the worker consumes, by a thread of its own, for the
                                 families of its tier (a fast-tier worker never builds the
                                 maintenance products); or at the first call of one of its
                                 handlers if that comes first (the job's thread builds it, or
                                 waits for the build under way). A part that fails to build
                                 stops the worker (``services.app.cli.worker``)
===============================  ==============================================================

A family takes its handler off :meth:`Deferred.handlers`, a stand-in typed as the part
itself (``families(actors.handlers())`` reads ``actors.sync_source`` as it would off the
built actors), whose methods build the part at their first call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")


class Deferred(Generic[T]):
    """A part built once, by the first :meth:`get`; callers meanwhile wait for that build.
    A build that raises is not kept: the next :meth:`get` builds again (and raises again)."""

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._part: T | None = None
        self._lock = threading.Lock()
        #: The module of the product that defers the part (its handlers are named after it).
        self.module = build.__module__

    @property
    def built(self) -> bool:
        return self._part is not None

    def get(self) -> T:
        """The part, built now if it is not yet."""
        part = self._part
        if part is not None:
            return part
        with self._lock:
            if self._part is None:
                self._part = self._build()
            return self._part

    def handlers(self) -> T:
        """A stand-in for the part: each of its attributes is a handler calling the part's
        method of that name, built at the first call."""
        return cast(T, _Handlers(self))


class _Handlers:
    """The attributes of a deferred part, as handlers (see :meth:`Deferred.handlers`)."""

    def __init__(self, deferred: Deferred[Any]) -> None:
        self._deferred = deferred

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        deferred = self._deferred

        def handler(*args: Any, **kwargs: Any) -> Any:
            return getattr(deferred.get(), name)(*args, **kwargs)

        handler.__name__ = handler.__qualname__ = name
        handler.__module__ = deferred.module  # Dramatiq names an actor's logger after it
        handler.deferred = deferred  # type: ignore[attr-defined]  # the worker's warm-up
        return handler


def deferred_of(handler: Callable[..., Any]) -> Deferred[Any] | None:
    """The deferred part ``handler`` calls into, or None for a handler built at bootstrap."""
    found = getattr(handler, "deferred", None)
    return found if isinstance(found, Deferred) else None
