"""Named fault points: places between two writes where a test can kill the worker.

A fault point does nothing unless the environment variable ``SPEEDTIER_FAULT`` names it when
the process starts (``SPEEDTIER_FAULT=promote.after``); then the process SIGKILLs itself the
first time it passes that point, as a crash would, with no cleanup. Only the chaos suite and
tests set the variable.

=====================  ========================================================
point                  between
=====================  ========================================================
``fetch.after``        a batch fetched (and its ungrouped jobs claimed) and any run
``claim.after``        a grouped job's slot claimed and its run
``run.after``          the handler returning and the outcome being settled (a settle
                       handed to the settle sender and not yet answered is the same:
                       its outcome was never recorded)
``settle.after``       the outcome settled (and acked) and the worker letting go of the
                       message (in the settle sender's thread)
``promote.before``     a delayed message being due and its move to its queue
``promote.after``      the move (and ack) of a delayed message and forgetting it
``step.after``         a resumable step marked completed and the job's next step
``wav.after``          a product's object written to storage and the row that attaches it
                       (an upload's WAV recording and its attachment insert)
=====================  ========================================================
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "SPEEDTIER_FAULT"
POINTS = frozenset(
    {
        "fetch.after",
        "claim.after",
        "run.after",
        "settle.after",
        "promote.before",
        "promote.after",
        "step.after",
        "wav.after",
    }
)
_ARMED = os.environ.get(FAULT_ENV, "")
if _ARMED and _ARMED not in POINTS:
    raise RuntimeError(f"{FAULT_ENV}={_ARMED!r} names no fault point ({', '.join(sorted(POINTS))})")


def fault_point(name: str) -> None:
    """Kill this process here when ``SPEEDTIER_FAULT`` names ``name``."""
    if name == _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
