"""The chaos suite's job families, handler and ledger (imported by its worker processes).

Four kinds of job, all on the fast tier, all behind a kill switch read from PostgreSQL:

=============  ============================================================================
kind           what the handler does
=============  ============================================================================
``plain``      returns (a family without a group: claimed a fetched batch at a time)
``grouped``    returns (at most 2 running per organization: slots, leases, parked lists)
``delayed``    first run: ``Delay`` 1 s (back through the delay queue); then returns
``retrying``   first run: ``Retryable`` (an attempt spent, back after 0.2 s); then returns
``pg``         reads PostgreSQL, then returns (an outage delays it, spends nothing)
``slow``       sleeps 1 s, then, while it still holds its delivery
               (``tiers.deliveries.check_delivery``), counts its effect (``effects``)
``poison``     kills its worker process (``os._exit``), every time
``pg_write``   writes a row to PostgreSQL (table ``chaos_writes``, made by the scenario
               that uses this kind), then returns: a read-only database delays it
=============  ============================================================================

The ledger (Redis hashes under ``<ns>:chaos:``): ``starts`` (runs begun per item),
``settled`` (runs the platform settled as ``completed`` per item: more than one is an effect
run twice, a finished job brought back), ``effects`` (effects a ``slow`` job committed: more
than one is a handler that completed twice) and ``done`` (completion times, for recovery).
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from dramatiq.broker import Broker
from dramatiq.middleware import Middleware
from pydantic import BaseModel
from sqlalchemy import Engine, text

from shared.errors import Delay, Retryable
from tiers.deliveries import check_delivery
from tiers.families import Family
from tiers.middleware.deliveries import RUN_EPOCH
from tiers.middleware.outcomes import Outcomes
from tiers.options import JOB_ID, REDIS_MESSAGE_ID
from tiers.policies import RetryPolicy

PAUSE_FLAG = "pause_api2_chaos"
KINDS = ("plain", "grouped", "delayed", "retrying", "pg")
RETRY = RetryPolicy(max_attempts=5, base_seconds=0.2)
DESIGNED_FAILURE = "chaos: first attempt fails"
_STATE: dict[str, Any] = {}


class Params(BaseModel):
    item: str
    kind: str = "plain"


def ledger_key(namespace: str, name: str) -> str:
    return f"{namespace}:chaos:{name}"


def handler(organization_id: int, item: str, kind: str) -> None:
    client: redis.Redis = _STATE["client"]
    starts = int(client.hincrby(ledger_key(_STATE["ns"], "starts"), item, 1))
    if kind == "delayed" and starts == 1:
        raise Delay.after(1.0, reason="chaos")
    if kind == "retrying" and starts == 1:
        raise Retryable(DESIGNED_FAILURE)
    if kind == "poison":
        os._exit(1)
    if kind == "slow":
        time.sleep(1.0)
        check_delivery()
        client.hincrby(ledger_key(_STATE["ns"], "effects"), item, 1)
    if kind == "pg":
        engine: Engine = _STATE["engine"]
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    if kind == "pg_write":
        with _STATE["engine"].begin() as connection:
            connection.execute(text("INSERT INTO chaos_writes VALUES (:item)"), {"item": item})


class SettledLedger(Middleware):
    """Counts, once the outcome is settled, each run the job record shows completed by this
    very delivery. It counts after the message's ack, which waits for the settle's answer
    (``tiers.settling.Settling``): after the run itself the settle may still be on its way,
    and a count taken then missed most runs (494 of 3,000 in one quick run), so a run done
    twice could go unseen."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    def after_ack(self, broker: Broker, message: Any) -> None:
        if JOB_ID not in message.options:
            return
        record = self._read(f"{self.namespace}:job:{message.options[JOB_ID]}")
        # The count is written once: written again after a lost reply it could count a run
        # twice. A count lost to a Redis outage can only hide a duplicate, never invent one.
        # A run's settle that was refused (a newer run of the same delivery holds the record)
        # is not counted: its epoch is not the record's.
        # Its run's epoch (for a run started before its start's answer came, the answer's,
        # which came before the settle's, which the ack waited for).
        epoch = getattr(message, RUN_EPOCH, None)
        if epoch is None:  # not run here (a copy found finished, superseded or taken back)
            return
        mine = epoch == "0" or record[2] is None or record[2] == epoch.encode()
        if (
            mine
            and record[0] == b"completed"
            and record[1] == message.options[REDIS_MESSAGE_ID].encode()
        ):
            item = message.kwargs["item"]
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(ledger_key(self.namespace, "settled"), item, 1)
            pipe.rpush(ledger_key(self.namespace, "done"), f"{time.time():.3f}")
            pipe.execute()

    def _read(self, record: str) -> list[Any]:
        """The record's state and current message, waiting (10 s at most) for a Redis that
        restarts or loads its data."""
        deadline = time.monotonic() + 10
        while True:
            try:
                return list(self.client.hmget(record, "state", "cur", "epoch"))
            except (redis.ConnectionError, redis.TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def families() -> list[Family]:
    common: dict[str, Any] = {
        "handler": handler,
        "params": Params,
        "fixed_tier": "fast",
        "pause_flag": PAUSE_FLAG,
        "retry": RETRY,
    }
    return [
        Family(
            name="chaos_plain", kind="chaos_plain", job_id=lambda o, p: f"chaos-{p.item}", **common
        ),
        Family(
            name="chaos_grouped",
            kind="chaos_grouped",
            job_id=lambda o, p: f"chaos-{p.item}",
            group_caps={"fast": 2},
            **common,
        ),
    ]


def family_of(kind: str) -> str:
    return "chaos_grouped" if kind == "grouped" else "chaos_plain"


def register(platform: Any) -> None:
    """Service-module entry point: ``bootstrap(services=["bench.chaos.workload"])``."""
    client = redis.Redis.from_url(platform.settings.redis_url)
    _STATE.update(client=client, ns=platform.settings.redis_namespace, engine=platform.engine)
    for family in families():
        platform.add_family(family)
    platform.broker.add_middleware(
        SettledLedger(client, platform.settings.redis_namespace), before=Outcomes
    )
