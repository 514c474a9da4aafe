"""A child process whose wall clock is shifted: libfaketime preloaded into it (its wheel
ships the library), the monotonic clock left alone. What a host whose clock is off looks
like to the platform: ``time.time()`` and every timestamp the process writes move, its
timeouts do not."""

from __future__ import annotations

import libfaketime


def shifted_clock_env(offset: str) -> dict[str, str]:
    """Environment variables that shift a child process's wall clock by ``offset``
    (libfaketime's syntax: ``+40s``, ``-10s``)."""
    _needs_reload, env = libfaketime.get_reload_information()
    return {**env, "FAKETIME": offset, "DONT_FAKE_MONOTONIC": "1"}
