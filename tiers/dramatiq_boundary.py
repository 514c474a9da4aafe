"""The Dramatiq boundary: every part of Dramatiq below its public API that the platform
overrides, calls or depends on, with why. ``setup.cfg`` pins ``dramatiq>=2.2,<2.3``;
``tests/unit/tiers/test_dramatiq_boundary.py`` checks each entry below against the installed
Dramatiq, so an upgrade that renames, removes or reshapes one fails there, naming it.

=====================================================  ==========================================
Dramatiq internal                                      why the platform needs it
=====================================================  ==========================================
``dramatiq.brokers.redis._RedisConsumer``              ``tiers.consumer.TierConsumer`` subclasses
(its ``__init__(broker, queue_name, prefetch,          it: fetches that claim a batch in the same
timeout)``, ``__next__``, ``ack``, ``nack``,           script, held delayed messages kept across
``requeue``; attributes ``message_cache``,             a Redis blip, settles sent without waiting,
``queued_message_ids``, ``misses``, ``prefetch``,      sleeping on an idle queue (``queue_watch``)
``timeout``)
``RedisBroker._dispatch(command)``                     overridden by ``TierBroker._dispatch``:
                                                       the dispatch script sent on a kept
                                                       connection (``ScriptSender``)
``RedisBroker._should_do_maintenance(command)``        the draw that makes a random share of
                                                       commands do Dramatiq's maintenance (dead
                                                       workers' messages back); overridden by
                                                       ``TierBroker`` never to draw it: the
                                                       maintenance runs on a schedule
                                                       (``tiers.dead_workers``)
``RedisBroker._max_unpack_size()``                     the largest batch one Lua ``unpack`` takes
                                                       (``maxstack.lua``), the fetch's limit
``RedisBroker.scripts["dispatch"]`` and its argument   ``TierBroker._dispatch`` calls the script
order (command, timestamp, queue, broker id,           with Dramatiq's arguments; the platform's
heartbeat timeout, dead message TTL, do maintenance,   own scripts (``tiers/lua``) read and write
max unpack size, ...); ``dispatch.lua``'s text         Dramatiq's keys: ``<ns>:<queue>``,
                                                       ``<ns>:<queue>.msgs``, ``.DQ``/``.XQ``
                                                       queues, ``<ns>:__acks__.<worker>.<queue>``,
                                                       the heartbeats
``RedisBroker`` attributes ``broker_id``,              read by the dispatch call and the queue
``heartbeat_timeout``, ``dead_message_ttl``,           watch
``namespace``, ``client``
``Worker._add_consumer(queue_name, *, delay)``,        overridden by ``TierWorker``: consumers
``_add_worker()``, ``start``, ``stop(timeout)``        of the platform's class, registered with
                                                       the queue watch; worker threads started
                                                       before the consumers; a stop that waits
                                                       for settles
``dramatiq.worker._WorkerMiddleware(worker)``          ``TierWorker.start`` adds it as Dramatiq's
                                                       start does: the consumers of queues the
                                                       worker did not start itself
``Worker`` attributes ``consumers``, ``work_queue``,   read by ``TierWorker`` (stop, consumer
``workers``, ``consumer_whitelist``,                   set-up) and the liveness heartbeat
``queue_prefetch``, ``delay_prefetch``,
``worker_threads``, ``worker_timeout``
``ConsumerThread`` (its keyword ``__init__``;          ``TierConsumerThread``
``run``, ``close``, ``pause``, ``stop``,               (``tiers.consumer_thread``) overrides or
``handle_message``, ``handle_delayed_messages``,       calls them: delayed messages moved when
``post_process_message``, ``requeue_messages``;        due, messages handed back on stop, acks
attributes ``consumer``, ``delay_queue``,              after the settle lands, pause and wake
``running``, ``paused``, ``paused_event``)
=====================================================  ==========================================

Following Dramatiq upstream: read its changelog for these names, widen the pin, run
``tests/unit/tiers/test_dramatiq_boundary.py`` (every entry), then ``make test`` and
``make chaos``. When ``dispatch.lua`` changes, compare its keys and arguments with
``tiers/lua/_prelude.lua`` and ``TierBroker._dispatch`` before updating its digest below.
"""

from __future__ import annotations

from dataclasses import dataclass

from dramatiq.brokers.redis import _RedisConsumer

#: The Dramatiq versions this boundary was checked against (``setup.cfg``'s pin).
PINNED = ">=2.2,<2.3"

#: SHA-256 of the ``dispatch.lua`` Dramatiq ships, whose keys and arguments the platform's
#: scripts and ``TierBroker._dispatch`` follow.
DISPATCH_LUA_SHA256 = "ba4d872e4fb204ebc3f73ca4719265a9946d70e847856c125314f01a8c90540c"

#: The consumer class ``tiers.consumer.TierConsumer`` subclasses (the test checks it is this one).
RedisConsumer = _RedisConsumer


@dataclass(frozen=True)
class Internal:
    """One Dramatiq name the platform relies on.

    Attributes:
      owner: ``module:Class`` (or ``module`` for a module-level name).
      name: the method, attribute or class.
      kind: ``method`` (with ``parameters``), ``attribute`` (set by the owner's ``__init__``)
        or ``class``.
      parameters: a method's parameter names, in order, ``self`` included.
      why: what the platform does with it.
    """

    owner: str
    name: str
    kind: str
    why: str
    parameters: tuple[str, ...] = ()


_BROKER = "dramatiq.brokers.redis:RedisBroker"
_CONSUMER = "dramatiq.brokers.redis:_RedisConsumer"
_WORKER = "dramatiq.worker:Worker"
_THREAD = "dramatiq.worker:ConsumerThread"

INTERNALS: tuple[Internal, ...] = (
    Internal("dramatiq.brokers.redis", "_RedisConsumer", "class", "TierConsumer's base"),
    Internal(
        _CONSUMER,
        "__init__",
        "method",
        "TierConsumer calls it",
        ("self", "broker", "queue_name", "prefetch", "timeout"),
    ),
    Internal(_CONSUMER, "__next__", "method", "overridden: the claiming fetch", ("self",)),
    Internal(_CONSUMER, "ack", "method", "overridden: acked once settled", ("self", "message")),
    Internal(_CONSUMER, "nack", "method", "overridden: dead-lettered", ("self", "message")),
    Internal(_CONSUMER, "requeue", "method", "overridden: unclaimed first", ("self", "messages")),
    *(
        Internal(_CONSUMER, name, "attribute", "TierConsumer reads or replaces it")
        for name in ("message_cache", "queued_message_ids", "misses", "prefetch", "timeout")
    ),
    Internal(_BROKER, "_dispatch", "method", "overridden by TierBroker", ("self", "command")),
    Internal(
        _BROKER,
        "_should_do_maintenance",
        "method",
        "overridden by TierBroker: never drawn",
        ("self", "command"),
    ),
    Internal(_BROKER, "_max_unpack_size", "method", "the fetch's batch limit", ("self",)),
    *(
        Internal(_BROKER, name, "attribute", "the dispatch call's arguments and the watch")
        for name in (
            "scripts",
            "broker_id",
            "heartbeat_timeout",
            "dead_message_ttl",
            "namespace",
            "client",
        )
    ),
    Internal(
        _WORKER,
        "_add_consumer",
        "method",
        "overridden by TierWorker",
        ("self", "queue_name", "delay"),
    ),
    *(
        Internal(_WORKER, name, "attribute", "TierWorker's set-up, stop and heartbeat")
        for name in (
            "consumers",
            "work_queue",
            "workers",
            "consumer_whitelist",
            "queue_prefetch",
            "delay_prefetch",
            "worker_threads",
            "worker_timeout",
        )
    ),
    Internal(
        _THREAD,
        "__init__",
        "method",
        "TierConsumer's thread is built with these keywords",
        ("self", "broker", "queue_name", "prefetch", "work_queue", "worker_timeout"),
    ),
    *(
        Internal(_THREAD, name, "method", "overridden by TierConsumerThread", ("self",))
        for name in ("run", "close", "pause", "stop", "handle_delayed_messages")
    ),
    *(
        Internal(_THREAD, name, "method", "overridden or called by TierConsumerThread", params)
        for name, params in (
            ("handle_message", ("self", "message")),
            ("post_process_message", ("self", "message")),
            ("requeue_messages", ("self", "messages")),
        )
    ),
    Internal(_WORKER, "start", "method", "overridden by TierWorker", ("self",)),
    Internal(_WORKER, "_add_worker", "method", "called by TierWorker.start", ("self",)),
    Internal("dramatiq.worker", "_WorkerMiddleware", "class", "added by TierWorker.start"),
    Internal(
        "dramatiq.worker:_WorkerMiddleware",
        "__init__",
        "method",
        "TierWorker.start builds it",
        ("self", "worker"),
    ),
    Internal(_WORKER, "stop", "method", "overridden by TierWorker", ("self", "timeout")),
    *(
        Internal(_THREAD, name, "attribute", "read by the platform's thread and the watch")
        for name in ("consumer", "delay_queue", "running", "paused", "paused_event")
    ),
)
