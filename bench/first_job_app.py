"""Raw Dramatiq's side of ``bench.first_job``: the module its ``dramatiq`` command loads.

A plain ``RedisBroker`` on the Redis and namespace that ``FIRST_JOB_REDIS_URL`` and
``FIRST_JOB_NAMESPACE`` name, with Dramatiq's default middleware, and one actor that does
nothing. Dramatiq's command finds the broker set here, as an application's module sets it.
``FIRST_JOB_LIBRARIES`` (module names, comma-separated) are imported with it, as an
application's module imports the libraries its jobs use.
"""

from __future__ import annotations

import importlib
import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

QUEUE = "first_job"

broker = RedisBroker(  # type: ignore[no-untyped-call]
    url=os.environ.get("FIRST_JOB_REDIS_URL", "redis://127.0.0.1:6379/14"),
    namespace=os.environ.get("FIRST_JOB_NAMESPACE", "bench-first-job"),
)
dramatiq.set_broker(broker)

for library in filter(None, os.environ.get("FIRST_JOB_LIBRARIES", "").split(",")):
    importlib.import_module(library)


@dramatiq.actor(queue_name=QUEUE)
def first_job(item: str) -> None:
    """Nothing: the benchmark times when it starts."""
