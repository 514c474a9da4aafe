"""What the script sender says of calls Redis did not answer, and its atomic sends: real
Redis (the shared one for scripts of unique bodies, a stopped one of the test's own)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import uuid

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.fixtures_redis import MakeRedisServer
from tiers.script_send import OutcomeUnknown, ScriptSender


def test_an_atomic_send_of_a_script_redis_forgot_runs_every_call_once(
    redis_client: redis.Redis, namespace: str
) -> None:
    # A script body Redis has never seen: the transaction's calls are all refused (NOSCRIPT),
    # it is loaded, and the transaction sent again
    script = redis_client.register_script(
        f"-- {uuid.uuid4()}\nreturn redis.call('INCR', KEYS[1] .. ':' .. ARGV[1])"
    )
    sender = ScriptSender(redis_client)
    assert sender.send(script, namespace, [["a"], ["b"], ["a"]], atomic=True) == [1, 1, 2]
    sender.close()


def test_a_refused_connection_is_not_an_unknown_outcome() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    client = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    script = client.register_script("return 1")
    with pytest.raises(redis.ConnectionError) as refused:
        ScriptSender(client).send(script, "k", [[]])
    assert not isinstance(refused.value, OutcomeUnknown)


def test_a_redis_stopped_after_the_send_is_an_unknown_outcome(
    make_redis_server: MakeRedisServer,
) -> None:
    url = make_redis_server()
    client = redis.Redis.from_url(f"{url}?socket_timeout=0.5")
    pid = int(client.info("server")["process_id"])
    script = client.register_script("return redis.call('INCR', KEYS[1])")
    sender = ScriptSender(client)
    assert sender.send(script, "counter", [[]]) == [1]
    os.kill(pid, signal.SIGSTOP)
    resumed = threading.Timer(1.0, os.kill, (pid, signal.SIGCONT))
    resumed.start()
    try:
        with pytest.raises(OutcomeUnknown):
            sender.send(script, "counter", [[], []], atomic=True)
    finally:
        resumed.join()
        os.kill(pid, signal.SIGCONT)
    # The calls did run once Redis resumed: "unknown" was the truth, "not sent" would not be
    assert int(redis.Redis.from_url(url).get("counter") or 0) == 3
    sender.close()
    client.close()
