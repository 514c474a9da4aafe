"""The broker's Redis client parses replies (and packs commands) with hiredis, a dependency:
redis-py falls back to its pure-Python parser without a word when hiredis is missing."""

from __future__ import annotations

import redis
from redis._parsers import _HiredisParser

from tiers.broker import TierBroker


def test_the_broker_client_parses_replies_with_hiredis(broker: TierBroker) -> None:
    assert redis.utils.HIREDIS_AVAILABLE
    broker.client.ping()
    connection = broker.client.connection_pool.get_connection()
    try:
        assert isinstance(connection._parser, _HiredisParser)
    finally:
        broker.client.connection_pool.release(connection)


def test_the_broker_client_gives_every_thread_of_a_large_worker_a_connection(
    broker: TierBroker,
) -> None:
    # Given the broker a process builds from its Redis URL
    pool = broker.client.connection_pool
    # When 150 threads each hold one of its connections at once (a worker of 150 threads:
    # redis-py's default pool refuses the 101st with "Too many connections")
    held = [pool.get_connection() for _ in range(150)]
    try:
        # Then every one of them is a live connection of its own
        assert len({id(connection) for connection in held}) == 150
        held[-1].send_command("PING")
        assert held[-1].read_response() == b"PONG"
    finally:
        for connection in held:
            pool.release(connection)
