"""Benchmarks of the platform against real Redis and real Dramatiq worker processes.

Run them all with ``python -m bench`` (``make bench``); ``--quick`` is a smaller smoke run.

Keep this package's top level light: spawned worker processes import it (and
``bench.__main__``), and the raw Dramatiq worker of the throughput benchmark must not pay for
modules it does not use, or its memory would not be comparable.
"""

import os

# An unset SPEEDTIER_ENV means production, which refuses a short token, a missing credentials
# key and volatile Redis: benchmarks and the processes they start run as test unless a
# scenario says otherwise.
os.environ.setdefault("SPEEDTIER_ENV", "test")
