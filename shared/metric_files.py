"""The files multiprocess metrics live in, made safe on a full disk.

In multiprocess mode prometheus_client keeps each process's values in files of
``PROMETHEUS_MULTIPROC_DIR`` that it maps into memory (``MmapedDict``). It sizes a file by
extending it, so the filesystem gives a page its space only when a value is first written
into it; when the filesystem is full (the node's disk, the pod's emptyDir on a full node, a
full ``/tmp``), that write is a SIGBUS and the process dies. A worker would die mid-job at
the first new series of a metric (its run then counted as died, against a job that did
nothing wrong), and a pool child started on that disk at its first metric.

Here the bytes of each new entry (and a new file's first page) are given their space first
(``posix_fallocate``), so a full disk is an ``OSError`` at that point instead; the value then
stays in the process's memory only (:class:`SafeValue`): its series is missing from the
scrape until the process restarts on a disk with room, and a WARNING says so once (a
child forked after it stays silent). Values already in a file keep being written: their space
is there.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from typing import Any

from prometheus_client import values
from prometheus_client.mmap_dict import MmapedDict

log = logging.getLogger(__name__)

_warned = threading.Event()


class ReservedMmapedDict(MmapedDict):
    """A :class:`MmapedDict` that reserves disk space for what it is about to write.

    Raises:
      OSError: the filesystem has no room (``ENOSPC``) when a file is made or an entry added.
    """

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if not read_mode:
            with open(filename, "a+b") as handle:
                if os.fstat(handle.fileno()).st_size == 0:
                    # The header (how much of the file is used) is written at once.
                    os.posix_fallocate(handle.fileno(), 0, mmap.PAGESIZE)
        super().__init__(filename, read_mode)  # type: ignore[no-untyped-call]

    def _init_value(self, key: str) -> None:
        encoded = key.encode("utf-8")
        # An entry as MmapedDict writes it: its key's length, the key padded to 8 bytes, and
        # two doubles.
        padded = len(encoded) + 8 - (len(encoded) + 4) % 8
        os.posix_fallocate(self._f.fileno(), self._used, 4 + padded + 16)
        super()._init_value(key)  # type: ignore[no-untyped-call]


def _lost(exc: OSError) -> None:
    if not _warned.is_set():
        _warned.set()
        log.warning(
            "metrics: no room in %s (%s): new series of this process are kept in its memory "
            "and missing from the scrape; the jobs are not affected",
            os.environ.get("PROMETHEUS_MULTIPROC_DIR"),
            exc,
        )


def safe_value_class() -> type[Any]:
    """prometheus_client's multiprocess value class, over :class:`ReservedMmapedDict`, whose
    values that find no room on disk are kept in memory (:class:`SafeValue`)."""
    values.MmapedDict = ReservedMmapedDict  # type: ignore[attr-defined]  # what MultiProcessValue opens
    base: type[Any] = values.MultiProcessValue()  # type: ignore[no-untyped-call]

    class SafeValue(base):  # type: ignore[misc]
        """A multiprocess value that a full disk leaves in this process's memory."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._in_memory = False
            try:
                super().__init__(*args, **kwargs)
            except OSError as exc:
                _lost(exc)
                self._in_memory = True
                self._value, self._timestamp = 0.0, 0.0

        def inc(self, amount: float) -> None:
            if self._in_memory:
                self._value += amount
                return
            try:
                super().inc(amount)
            except OSError as exc:
                _lost(exc)
                self._in_memory = True

        def set(self, value: float, timestamp: float | None = None) -> None:
            if self._in_memory:
                self._value, self._timestamp = value, timestamp or 0.0
                return
            try:
                super().set(value, timestamp)
            except OSError as exc:
                _lost(exc)
                self._in_memory = True
                self._value = value

        def get(self) -> float:
            if not self._in_memory:
                try:
                    return float(super().get())
                except OSError as exc:  # a fork's reset of the values found no room
                    _lost(exc)
                    self._in_memory = True
            return float(self._value)

    return SafeValue
