"""Prometheus metrics: one place to declare them, multiprocess-safe, and one way to expose them.

===========================  ===================================================================
piece                        what it does
===========================  ===================================================================
:func:`counter`,             get-or-create a metric named ``speedtier_<name>`` in the default
:func:`histogram`,           registry (declaring the same name twice returns the same object, so
:func:`gauge`                a module imported twice in tests does not fail)
:func:`use_directory`        switch this process to multiprocess mode on a directory shared
                             with its children (the worker pool, gunicorn, ``speedtier up``);
                             must run before any labelled child of a metric is created
:func:`add_collector`        a scrape-time collector (queue depth read from Redis); only the
                             process that serves ``/metrics`` adds one
:func:`render`               the exposition text: the processes' files summed, plus this
                             process's scrape-time collectors
:func:`serve`                a small HTTP server answering ``GET /metrics`` (worker pool,
                             scheduler) on a daemon thread
:func:`mark_dead`            drop a dead child's live gauges (the pool calls it)
===========================  ===================================================================

Why a directory: Dramatiq workers, gunicorn workers and pool children are separate processes;
each writes its values to ``PROMETHEUS_MULTIPROC_DIR`` and the serving process sums them at
scrape time (``prometheus_client``'s multiprocess mode). Without the variable a process keeps
its values in memory and exposes only its own.

The files are written so that a full disk does not crash the process
(:mod:`shared.metric_files`): a series that finds no room is kept in memory and missing from
the scrape.

Label values must be bounded (family, tier, outcome, provider, source): never an organization
id, a job id or a URL.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from shared.lazy_package import defer_init

# A recording process (every worker) never loads the exposition half of prometheus_client;
# the serving process loads it at its first render or serve (shared/lazy_package.py).
defer_init("prometheus_client")

from prometheus_client import multiprocess, values  # noqa: E402  (submodules only)
from prometheus_client.metrics import Counter, Gauge, Histogram  # noqa: E402
from prometheus_client.registry import REGISTRY, CollectorRegistry  # noqa: E402

from shared.metric_files import safe_value_class  # noqa: E402

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

PREFIX = "speedtier_"
ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Seconds: a job takes milliseconds (a tick) to minutes (a crawl).
RUN_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

GaugeMode = Literal["livesum", "liveall", "max", "min", "sum", "all", "mostrecent"]

_lock = threading.Lock()
_metrics: dict[str, Any] = {}
_collectors: list[Collector] = []


if os.environ.get(ENV):
    # A process started in multiprocess mode (a pool's child, a gunicorn worker): its values
    # go to files that a full disk cannot crash it on (shared.metric_files).
    values.ValueClass = safe_value_class()


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


def counter(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Counter:
    """The counter ``speedtier_<name>_total``."""
    return _get_or_create(Counter, name, documentation, labelnames)  # type: ignore[no-any-return]


def histogram(
    name: str,
    documentation: str,
    labelnames: Sequence[str] = (),
    buckets: Sequence[float] = RUN_BUCKETS,
) -> Histogram:
    """The histogram ``speedtier_<name>`` (``_bucket``, ``_sum``, ``_count``)."""
    return _get_or_create(  # type: ignore[no-any-return]
        Histogram, name, documentation, labelnames, buckets=tuple(buckets)
    )


def gauge(
    name: str, documentation: str, labelnames: Sequence[str] = (), mode: GaugeMode = "livesum"
) -> Gauge:
    """The gauge ``speedtier_<name>``; ``mode`` says how processes' values combine."""
    return _get_or_create(  # type: ignore[no-any-return]
        Gauge, name, documentation, labelnames, multiprocess_mode=mode
    )


def _get_or_create(
    kind: type, name: str, documentation: str, labelnames: Sequence[str], **options: Any
) -> Any:
    full = PREFIX + name
    with _lock:
        existing = _metrics.get(full)
        if existing is None:
            _ensure_directory()
            existing = kind(full, documentation, labelnames=tuple(labelnames), **options)
            _metrics[full] = existing
        elif not isinstance(existing, kind) or getattr(existing, "_labelnames", ()) != tuple(
            labelnames
        ):
            raise ValueError(f"metric {full} already declared with another type or labels")
        return existing


def use_directory(path: str | os.PathLike[str], *, wipe: bool = False) -> Path:
    """Write this process's values (and, through the environment, its children's) to
    ``path``. ``wipe``: empty it first, as the owner of the directory does once at start."""
    directory = Path(path)
    if wipe and directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(directory)
    # prometheus_client picks its value class at import: pick again now that the variable is set.
    values.ValueClass = safe_value_class()
    return directory


def directory() -> str | None:
    return os.environ.get(ENV) or None


def _ensure_directory() -> None:
    """Create the configured directory if it is missing (a fresh /tmp emptyDir has none):
    prometheus_client writes there at a metric's first use and fails without it."""
    path = directory()
    if path:
        Path(path).mkdir(parents=True, exist_ok=True)


def add_collector(collector: Collector) -> None:
    """Add a collector run at scrape time by :func:`render` in this process."""
    with _lock:
        _collectors.append(collector)


def remove_collector(collector: Collector) -> None:
    with _lock:
        if collector in _collectors:
            _collectors.remove(collector)


class _Scrape:
    """What one scrape sees: the summed files (or this process's registry) plus collectors."""

    def __init__(self, extra: Sequence[Collector] = ()) -> None:
        self.extra = list(extra)

    def collect(self) -> Iterable[Metric]:
        path = directory()
        if path:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
            yield from registry.collect()
        else:
            yield from REGISTRY.collect()
        with _lock:
            collectors = [*_collectors, *self.extra]
        for collector in collectors:
            yield from collector.collect()


def render(extra: Sequence[Collector] = ()) -> tuple[bytes, str]:
    """``(body, content type)`` of a scrape, with ``extra`` collectors for this scrape only."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Scrape(extra))
    return generate_latest(registry), CONTENT_TYPE_LATEST


def serve(port: int, host: str = "0.0.0.0") -> WSGIServer:
    """Answer ``GET /metrics`` on ``host:port`` from a daemon thread; returns the server
    (``shutdown()`` stops it)."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Scrape())
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


def mark_dead(pid: int) -> None:
    """Drop the live gauges of a child process that exited (multiprocess mode only)."""
    path = directory()
    if path:
        multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
