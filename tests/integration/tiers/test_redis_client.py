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
