"""Benchmarks of the platform against real Redis and real Dramatiq worker processes.

Run them all with ``python -m bench`` (``make bench``); ``--quick`` is a smaller smoke run.

Keep this package's top level light: spawned worker processes import it (and
``bench.__main__``), and the raw Dramatiq worker of the throughput benchmark must not pay for
modules it does not use, or its memory would not be comparable.
"""
