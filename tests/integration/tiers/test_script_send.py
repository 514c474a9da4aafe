"""Script calls written straight onto a connection (``tiers.script_send``), on a real Redis:
replies in call order, one round trip, a forgotten script loaded and only its refused calls
sent again, a failing call's error raised with the connection left clean, a thread
interrupted mid-trip leaving no reply behind for the next call, threads sharing the sender,
a connection Redis dropped opened again, a forked child on its own connection, clients
whose connections are not plain ones."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.commands.core import Script

from tiers.script_send import KEEP_AT_MOST, ScriptSender


@pytest.fixture(scope="module")
def redis_url(private_redis_url: str) -> str:
    """Tests here flush the script cache (``SCRIPT FLUSH``), which is the whole server's: they
    run on a Redis of their own."""
    return private_redis_url


ECHO = "return ARGV[1]"
COUNT = "return redis.call('incr', KEYS[1] .. ':count:' .. ARGV[1])"
FAIL = "return redis.error_reply('refused ' .. ARGV[1])"


class Interrupted(BaseException):
    """An async exception (Dramatiq's time limit) landing between a send and its read."""


class CountingConnection(redis.Connection):
    """A real connection that counts its sends, and can be told to be interrupted before
    reading its next reply."""

    sent = 0
    interrupt_next_read = False

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if type(self).interrupt_next_read:
            type(self).interrupt_next_read = False
            raise Interrupted
        return super().read_response(*args, **kwargs)


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    yield client
    client.close()


@pytest.fixture
def sender(client: redis.Redis) -> Iterator[ScriptSender]:
    sender = ScriptSender(client)
    yield sender
    sender.close()


def script(client: redis.Redis, text: str) -> Script:
    return client.register_script(text)


def test_replies_come_in_call_order_in_one_round_trip(
    client: redis.Redis, sender: ScriptSender, namespace: str
) -> None:
    echo = script(client, ECHO)
    sender.send(echo, namespace, [["warm"]])
    before = CountingConnection.sent
    replies = sender.send(echo, namespace, [[f"call-{i}"] for i in range(50)])
    assert replies == [f"call-{i}".encode() for i in range(50)]
    assert CountingConnection.sent - before == 1


def test_a_forgotten_script_is_loaded_and_each_call_runs_once(
    client: redis.Redis, sender: ScriptSender, namespace: str
) -> None:
    count = script(client, COUNT)
    sender.send(count, namespace, [["warm"]])
    # Given Redis forgot its scripts (a restart or a flush)
    client.script_flush()
    # When a batch is sent
    replies = sender.send(count, namespace, [[str(i)] for i in range(5)])
    # Then every call ran exactly once and answered
    assert replies == [1] * 5
    assert [int(client.get(f"{namespace}:count:{i}") or 0) for i in range(5)] == [1] * 5


def test_a_failing_call_raises_after_every_reply_is_read(
    client: redis.Redis, sender: ScriptSender, namespace: str
) -> None:
    count, fail, echo = script(client, COUNT), script(client, FAIL), script(client, ECHO)
    sender.send(count, namespace, [["warm"]])
    with pytest.raises(redis.ResponseError, match="refused first"):
        sender.send(fail, namespace, [["first"], ["second"]])
    # The connection holds no leftover reply: the next call reads its own
    assert sender.send(echo, namespace, [["after"]]) == [b"after"]


def test_a_thread_interrupted_before_its_reply_leaves_none_for_the_next_call(
    client: redis.Redis, sender: ScriptSender, namespace: str
) -> None:
    echo = script(client, ECHO)
    sender.send(echo, namespace, [["warm"]])
    # Given a call interrupted after its command went out, before its reply was read
    CountingConnection.interrupt_next_read = True
    with pytest.raises(Interrupted):
        sender.send(echo, namespace, [["interrupted"]])
    # Then the next call on the sender reads its own reply, not the interrupted one's
    assert sender.send(echo, namespace, [["next"]]) == [b"next"]


def test_threads_sharing_a_sender_each_get_their_own_replies(
    client: redis.Redis, sender: ScriptSender, namespace: str
) -> None:
    echo = script(client, ECHO)
    results: dict[int, list[Any]] = {}
    start = threading.Barrier(8)

    def run(t: int) -> None:
        start.wait()
        results[t] = [sender.send(echo, namespace, [[f"{t}-{i}"]])[0] for i in range(100)]

    threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == {t: [f"{t}-{i}".encode() for i in range(100)] for t in range(8)}


def test_threads_sending_at_once_each_send_on_a_kept_connection(
    client: redis.Redis, sender: ScriptSender, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    echo = script(client, ECHO)
    pool = client.connection_pool
    hand_outs: list[int] = []
    get_connection, script_load = pool.get_connection, client.script_load
    # Loading a script Redis forgot goes through the pool, as it should: an earlier test's
    # SCRIPT FLUSH of this module's Redis can make a thread's first send reload it. Only the
    # sends are counted.
    loading = threading.local()

    def load(*args: Any, **kwargs: Any) -> Any:
        loading.on = True
        try:
            return script_load(*args, **kwargs)
        finally:
            loading.on = False

    def counting(*args: Any, **kwargs: Any) -> Any:
        if not getattr(loading, "on", False):
            hand_outs.append(1)
        return get_connection(*args, **kwargs)

    monkeypatch.setattr(client, "script_load", load)
    monkeypatch.setattr(pool, "get_connection", counting)
    start = threading.Barrier(KEEP_AT_MOST)
    sent: dict[int, list[Any]] = {}

    def run(t: int) -> None:
        start.wait()
        sent[t] = [sender.send(echo, namespace, [[f"{t}-{i}"]])[0] for i in range(200)]

    # When as many threads as a sender keeps connections for send together
    threads = [threading.Thread(target=run, args=(t,)) for t in range(KEEP_AT_MOST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # Then each got its replies, none through a connection handed out by the pool, and the
    # sender keeps no more connections than threads sent at once
    assert sent == {t: [f"{t}-{i}".encode() for i in range(200)] for t in range(KEEP_AT_MOST)}
    assert hand_outs == []
    assert 1 <= len(sender._idle) <= KEEP_AT_MOST
    # And closing it closes them all
    kept = list(sender._idle)
    sender.close()
    assert sender._idle == [] and all(c._sock is None for c in kept)


def test_a_sender_keeps_at_most_its_limit_of_connections(
    client: redis.Redis, sender: ScriptSender, namespace: str
) -> None:
    echo = script(client, ECHO)
    threads_at_once = KEEP_AT_MOST * 2
    start = threading.Barrier(threads_at_once)
    sent: dict[int, list[Any]] = {}

    def run(t: int) -> None:
        start.wait()
        sent[t] = [sender.send(echo, namespace, [[f"{t}-{i}"]])[0] for i in range(100)]

    threads = [threading.Thread(target=run, args=(t,)) for t in range(threads_at_once)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sent == {t: [f"{t}-{i}".encode() for i in range(100)] for t in range(threads_at_once)}
    assert len(sender._idle) <= KEEP_AT_MOST


def test_a_connection_redis_dropped_is_opened_again(
    client: redis.Redis, sender: ScriptSender, namespace: str, redis_client: redis.Redis
) -> None:
    count = script(client, COUNT)
    sender.send(count, namespace, [["warm"]])
    # Given Redis closed the sender's connection
    (kept,) = sender._idle
    kept.send_command("CLIENT", "ID")
    redis_client.client_kill_filter(_id=str(kept.read_response()))
    # When the next call is sent
    assert sender.send(count, namespace, [["after-kill"]]) == [1]
    # Then it ran once
    assert int(client.get(f"{namespace}:count:after-kill") or 0) == 1


def test_a_forked_child_opens_a_connection_of_its_own(
    client: redis.Redis, sender: ScriptSender, namespace: str
) -> None:
    echo = script(client, ECHO)
    sender.send(echo, namespace, [["warm"]])
    (parents,) = sender._idle
    # Given the sender's connections belong to another process (as after a fork)
    sender._pid = -1
    # When this "child" sends
    assert sender.send(echo, namespace, [["child"]]) == [b"child"]
    # Then it used a new connection, kept now in the parent's place, and left the parent's
    # socket alone
    (kept,) = sender._idle
    assert kept is not parents
    assert parents._sock is not None
    parents.disconnect()


def test_a_single_connection_client_is_served_through_its_own_connection(
    redis_url: str, namespace: str
) -> None:
    client = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        sender = ScriptSender(client)
        echo = script(client, ECHO)
        assert sender.send(echo, namespace, [["a"], ["b"]]) == [b"a", b"b"]
    finally:
        client.close()


class _WrappingConnection:
    """A connection that wraps redis-py's and does not expose its command packer, as a
    client-side cache's proxy connections do (redis-py's ``CacheProxyConnection``, which
    needs Redis 7.4 to be built: this stands in for it on any server)."""

    def __init__(self, **kwargs: Any) -> None:
        self._inner = redis.Connection(**kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "_command_packer":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_client_whose_connections_wrap_another_is_served_too(
    redis_url: str, namespace: str
) -> None:
    # A connection that wraps another hands its commands to redis-py's own packing
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=_WrappingConnection)
    client = redis.Redis(connection_pool=pool)
    sender = ScriptSender(client)
    try:
        echo = script(client, ECHO)
        assert sender.send(echo, namespace, [["a"], ["b"]]) == [b"a", b"b"]
        assert sender.send(echo, namespace, [["c"]]) == [b"c"]
    finally:
        sender.close()
        client.close()
