"""Where a running job notices that an operator cancelled it.

A worker thread running a job has a check installed for that job (``tiers.middleware.cancel``
installs and clears it around the actor); :func:`cancel_point` runs it and raises
:class:`~shared.errors.Cancelled` once the job's cancel was seen. The check reads memory only
(the worker's watcher polls Redis for cancels once a second), so a cancel point costs nothing
on the hot path. The provider HTTP client (``shared.http.JsonClient``) and the resumable-steps
runner (``tiers.job_state.run_steps``) call it before each request and each step; a handler
with a long loop of its own may call it too. Outside a job it does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_local = threading.local()


def install(check: Callable[[], None]) -> None:
    """Make ``check`` this thread's cancel point (it raises ``Cancelled`` when cancelled)."""
    _local.check = check


def clear() -> None:
    """This thread runs no job any more."""
    _local.check = None


def cancel_point() -> None:
    """Raise ``Cancelled`` if the job this thread runs was cancelled; otherwise return."""
    check = getattr(_local, "check", None)
    if check is not None:
        check()
