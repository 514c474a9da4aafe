"""Script calls of many threads share round trips (``tiers.script_batch``), on a real Redis:
every call gets its own reply, fewer round trips than calls carry them, a forgotten script is
loaded and only the refused calls sent again, one call's failure stays its own, and a
sending thread interrupted mid-trip leaves the other calls to be sent, not lost. Calls
nobody waits for (a settle) are sent by the sender thread, answered through their ``then``,
and sent again until a restarted Redis answers."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from services.app.embedded import start_embedded_redis
from shared import metrics
from tiers.script_batch import ScriptBatch, ScriptQueue
from tiers.settle_metrics import round_trip_recorder


@pytest.fixture(scope="module")
def redis_url(private_redis_url: str) -> str:
    """Tests here flush the script cache (``SCRIPT FLUSH``), which is the whole server's: they
    run on a Redis of their own."""
    return private_redis_url


ECHO = "return ARGV[1]"
COUNT = "return redis.call('incr', KEYS[1] .. ':count:' .. ARGV[1])"
FAIL = "return redis.error_reply('refused ' .. ARGV[1])"
#: Busy for ARGV[1] milliseconds of Redis time, then answers.
SLOW = """
local t = redis.call('time')
local deadline = t[1] * 1000 + t[2] / 1000 + tonumber(ARGV[1])
repeat
    t = redis.call('time')
until t[1] * 1000 + t[2] / 1000 >= deadline
return 'slow'
"""


class CountingConnection(redis.Connection):
    """A real connection that counts the round trips it starts."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sent += 1
        super().send_packed_command(command, check_health)


class Interrupted(BaseException):
    """Raised asynchronously in a thread, as Dramatiq's time limit does."""


@pytest.fixture
def counting_client(redis_url: str) -> redis.Redis:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    return redis.Redis(connection_pool=pool)


def scripts_on(client: redis.Redis) -> dict[str, Any]:
    return {
        name: client.register_script(text)
        for name, text in (("echo", ECHO), ("count", COUNT), ("fail", FAIL), ("slow", SLOW))
    }


def make_batch(client: redis.Redis, namespace: str) -> ScriptBatch:
    return ScriptBatch(client, namespace, scripts_on(client))


class Answers:
    """The answers a ScriptQueue hands to its calls' ``then``, with the threads they ran in."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: dict[str, tuple[Any, Exception | None]] = {}
        self.threads: set[str] = set()

    def then(self, key: str) -> Callable[[Any, Exception | None], None]:
        def record(reply: Any, error: Exception | None) -> None:
            with self.lock:
                self.got[key] = (reply, error)
                self.threads.add(threading.current_thread().name)

        return record


def in_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run each call in its own thread, all released at once; their results (or errors)."""
    results: list[Any] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    return results


def test_each_thread_gets_its_own_reply_in_fewer_round_trips(
    counting_client: redis.Redis, namespace: str
) -> None:
    batch = make_batch(counting_client, namespace)
    batch.call("echo", ["warm"])
    before = CountingConnection.sent
    # When 16 threads each make 25 calls at once
    replies = in_threads(
        [(lambda t=t: [batch.call("echo", [f"{t}-{i}"]) for i in range(25)]) for t in range(16)]
    )
    # Then each call got its own answer
    assert replies == [[f"{t}-{i}".encode() for i in range(25)] for t in range(16)]
    # And the 400 calls shared round trips
    assert CountingConnection.sent - before < 400


def test_each_call_runs_once(counting_client: redis.Redis, namespace: str) -> None:
    batch = make_batch(counting_client, namespace)
    in_threads([(lambda t=t: [batch.call("count", [str(t)]) for _ in range(20)]) for t in range(8)])
    counts = [int(counting_client.get(f"{namespace}:count:{t}") or 0) for t in range(8)]
    assert counts == [20] * 8


def test_a_forgotten_script_is_loaded_and_the_refused_calls_sent_once_more(
    counting_client: redis.Redis, namespace: str
) -> None:
    batch = make_batch(counting_client, namespace)
    batch.call("count", ["warm"])
    # Given Redis forgot its scripts (a restart or a flush)
    counting_client.script_flush()
    # When threads call them, some in shared round trips
    in_threads([(lambda t=t: [batch.call("count", [str(t)]) for _ in range(10)]) for t in range(8)])
    # Then every call ran exactly once
    counts = [int(counting_client.get(f"{namespace}:count:{t}") or 0) for t in range(8)]
    assert counts == [10] * 8


def test_one_calls_failure_is_its_own(counting_client: redis.Redis, namespace: str) -> None:
    batch = make_batch(counting_client, namespace)
    calls: list[Callable[[], Any]] = [
        (lambda t=t: batch.call("fail" if t == 3 else "echo", [str(t)])) for t in range(8)
    ]
    results = in_threads(calls)
    assert isinstance(results[3], redis.ResponseError)
    assert "refused 3" in str(results[3])
    assert [r for t, r in enumerate(results) if t != 3] == [
        str(t).encode() for t in range(8) if t != 3
    ]


def test_an_unreachable_redis_is_every_callers_error(namespace: str) -> None:
    client = redis.Redis(port=1, socket_connect_timeout=0.2)
    batch = make_batch(client, namespace)
    results = in_threads([(lambda t=t: batch.call("echo", [str(t)])) for t in range(4)])
    assert all(isinstance(result, redis.ConnectionError) for result in results)


def test_calls_waiting_behind_an_interrupted_sender_are_still_sent(
    counting_client: redis.Redis, namespace: str
) -> None:
    batch = make_batch(counting_client, namespace)
    batch.call("echo", ["warm"])
    outcome: dict[str, Any] = {}

    def sender() -> None:
        try:
            outcome["sender"] = batch.call("slow", ["400"])
        except Interrupted as exc:
            outcome["sender"] = exc

    # Given a thread sending a call that takes Redis 400 ms
    leading = threading.Thread(target=sender)
    leading.start()
    time.sleep(0.1)
    # And calls of other threads waiting behind it
    waiting = [
        threading.Thread(target=lambda t=t: outcome.__setitem__(t, batch.call("echo", [str(t)])))
        for t in range(3)
    ]
    for thread in waiting:
        thread.start()
    time.sleep(0.05)
    # When the sending thread is interrupted (raised as soon as its reply arrives)
    assert ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(leading.ident or 0), ctypes.py_object(Interrupted)
    )
    for thread in [leading, *waiting]:
        thread.join(timeout=10)
        assert not thread.is_alive()
    # Then the sender sees its interruption, and every waiting call is answered
    assert isinstance(outcome["sender"], Interrupted)
    assert [outcome[t] for t in range(3)] == [b"0", b"1", b"2"]
    # And the batch goes on sending
    assert batch.call("echo", ["after"]) == b"after"


def test_calls_nobody_waits_for_are_answered_through_then_in_shared_round_trips(
    counting_client: redis.Redis, namespace: str
) -> None:
    queue = ScriptQueue(counting_client, namespace, scripts_on(counting_client), "sender")
    answers = Answers()
    queue.submit("echo", ["warm"], answers.then("warm"))
    assert queue.flush(10)
    before = CountingConnection.sent
    # When 8 threads each submit 50 calls without waiting, and one call fails
    in_threads(
        [
            (
                lambda t=t: [
                    queue.submit(
                        "fail" if (t, i) == (3, 7) else "count",
                        [str(t)],
                        answers.then(f"{t}-{i}"),
                    )
                    for i in range(50)
                ]
            )
            for t in range(8)
        ]
    )
    assert queue.flush(10)
    # Then each call ran once and its answer reached its then, in the sender thread
    counts = [int(counting_client.get(f"{namespace}:count:{t}") or 0) for t in range(8)]
    assert counts == [50] * 3 + [49] + [50] * 4
    assert len(answers.got) == 401
    reply, error = answers.got["3-7"]
    assert reply is None and isinstance(error, redis.ResponseError)
    assert all(error is None for key, (_, error) in answers.got.items() if key != "3-7")
    assert answers.threads == {"sender"}
    # And the 400 calls shared round trips
    assert CountingConnection.sent - before < 400


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_sender_thread_that_ended_and_a_forked_child_get_a_sender_of_their_own(
    counting_client: redis.Redis, namespace: str
) -> None:
    trips: list[int] = []

    def end_after_the_first_trip(calls: int, _seconds: float, _left: int) -> None:
        trips.append(calls)
        if len(trips) == 1:
            raise SystemExit  # past the round trip's own error handling: the thread ends

    queue = ScriptQueue(
        counting_client,
        namespace,
        scripts_on(counting_client),
        "sender-ends",
        end_after_the_first_trip,
    )
    answers = Answers()
    # Given a sender thread that ended after its first round trip
    queue.submit("echo", ["first"], answers.then("first"))
    deadline = time.monotonic() + 10
    while not trips or any(t.name == "sender-ends" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the sender thread did not end"
        time.sleep(0.01)
    assert answers.got["first"] == (b"first", None)
    # When a call is submitted, Then a new sender sends it
    queue.submit("echo", ["again"], answers.then("again"))
    assert queue.flush(10) and answers.got["again"] == (b"again", None)
    # And a child forked from this process sends its calls on a sender of its own
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when its call is answered
        child = Answers()
        queue.submit("echo", ["child"], child.then("child"))
        os._exit(0 if queue.flush(10) and child.got.get("child") == (b"child", None) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_forked_child_leaves_the_parents_unsent_calls_to_the_parent(
    redis_url: str, namespace: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    queue = ScriptQueue(client, namespace, scripts_on(client), "sender")
    answers = Answers()
    # Given a sender busy with a slow call, and two calls waiting behind it
    queue.submit("slow", ["300"], answers.then("slow"))
    time.sleep(0.1)
    queue.submit("count", ["fork"], answers.then("a"))
    queue.submit("count", ["fork"], answers.then("b"))
    # When the process forks and the child sends a call of its own
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only when its own call is answered
        signal.alarm(20)
        child = Answers()
        queue.submit("count", ["fork"], child.then("child"))
        answered = queue.flush(10) and child.got.get("child", (None, True))[1] is None
        os._exit(0 if answered and not child.got.keys() - {"child"} else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # Then each call ran once: the parent's two by the parent, the child's by the child
    assert queue.flush(10)
    assert sorted(answers.got) == ["a", "b", "slow"]
    assert int(client.get(f"{namespace}:count:fork") or 0) == 3


def test_a_forked_child_of_a_thread_waiting_for_its_call_sends_its_own(
    redis_url: str, namespace: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    batch = make_batch(client, namespace)
    batch.call("slow", ["1"])  # the script loaded: the call below is in flight at the fork
    # Given a thread whose waited-for call is in flight (it leads the sending)
    waiting = threading.Thread(target=batch.call, args=("slow", ["300"]))
    waiting.start()
    time.sleep(0.1)
    # When the process forks, Then the child's own call is sent (no thread of the child
    # is sending) and answered
    pid = os.fork()
    if pid == 0:
        signal.alarm(10)  # a child that waits for a sender it does not have ends here
        answered = False
        try:
            answered = batch.call("echo", ["child"]) == b"child"
        finally:
            os._exit(0 if answered else 1)
    _, status = os.waitpid(pid, 0)
    waiting.join(10)
    assert os.waitstatus_to_exitcode(status) == 0


def test_calls_are_sent_again_until_a_restarted_redis_answers(
    tmp_path: Path, namespace: str
) -> None:
    server = start_embedded_redis(tmp_path / "redis")
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    client = redis.Redis.from_url(server.url, socket_connect_timeout=0.5)
    queue = ScriptQueue(client, namespace, scripts_on(client), "sender")
    answers = Answers()
    try:
        # Given Redis down
        server.crash()
        # When calls are submitted
        for i in range(5):
            queue.submit("count", ["down"], answers.then(str(i)))
        # Then they wait (flush says they are not answered)
        assert not queue.flush(0.5)
        assert answers.got == {}
        # And once Redis is back, each is answered, having run once
        server = start_embedded_redis(tmp_path / "redis", port=port)
        assert queue.flush(20)
        assert sorted(answers.got) == [str(i) for i in range(5)]
        assert all(error is None for _, error in answers.got.values())
        assert int(client.get(f"{namespace}:count:down") or 0) == 5
    finally:
        server.stop()


def pool_hand_outs(client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the connections the client's pool hands out from now on, but for loading a
    script (another test process may flush the server's scripts at any time)."""
    counted, loading = [0], [False]
    pool = client.connection_pool
    get_connection, script_load = pool.get_connection, client.script_load

    def counting(*args: Any, **kwargs: Any) -> Any:
        counted[0] += not loading[0]
        return get_connection(*args, **kwargs)

    def load(script: Any) -> Any:
        loading[0] = True
        try:
            return script_load(script)
        finally:
            loading[0] = False

    monkeypatch.setattr(pool, "get_connection", counting)
    monkeypatch.setattr(client, "script_load", load)
    return counted


def test_round_trips_go_on_a_kept_connection_not_through_the_pool(
    redis_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_url)
    batch = make_batch(client, namespace)
    queue = ScriptQueue(client, namespace, scripts_on(client), "sender")
    answers = Answers()
    batch.call("echo", ["warm"])
    queue.submit("echo", ["warm"], answers.then("warm"))
    assert queue.flush(10)
    hand_outs = pool_hand_outs(client, monkeypatch)
    # When calls are made one after the other, waited for and not
    for i in range(20):
        assert batch.call("echo", [str(i)]) == str(i).encode()
        queue.submit("echo", [str(i)], answers.then(str(i)))
        assert queue.flush(10)
    # Then each was answered without a connection handed out by the pool
    assert answers.got[str(19)] == (b"19", None)
    assert hand_outs[0] == 0
    batch.close()
    queue.close()
    client.close()


def test_each_round_trip_is_reported_with_its_calls_time_and_the_calls_left(
    redis_url: str, namespace: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    trips: list[tuple[int, float, int]] = []
    lock = threading.Lock()
    record_round_trip = round_trip_recorder("fast")

    def on_round_trip(calls: int, seconds: float, left: int) -> None:
        with lock:
            trips.append((calls, seconds, left))
        record_round_trip(calls, seconds, left)

    queue = ScriptQueue(client, namespace, scripts_on(client), "sender", on_round_trip)
    answers = Answers()
    before = parse_metrics()
    # When a call keeps Redis busy 300 ms and five more are submitted while it is in flight
    queue.submit("slow", ["300"], answers.then("slow"))
    time.sleep(0.1)
    for i in range(5):
        queue.submit("echo", [str(i)], answers.then(str(i)))
    assert queue.flush(10)
    # Then every call was carried by a reported trip, the slow one's lasting its 300 ms
    assert sum(calls for calls, _, _ in trips) == 6
    assert max(seconds for _, seconds, _ in trips) >= 0.3
    assert trips[-1][2] == 0 and queue.unanswered == 0
    if len(trips) == 2:  # (the sender had taken the slow call alone: the five waited)
        calls, _seconds, left = trips[0]
        assert (calls, left) == (1, 5)
    # And the metrics have each trip, those over 0.25 s (the slow one, at least) in the
    # buckets above it, and nothing left unanswered
    after = parse_metrics()
    name = "speedtier_settle_round_trip_seconds"

    def over_a_quarter(values: dict[str, float]) -> float:
        return values.get(f"{name}_bucket:inf", 0) - values.get(f"{name}_bucket:0.25", 0)

    assert after[f"{name}_count"] - before.get(f"{name}_count", 0) == len(trips)
    slow_trips = sum(1 for _, seconds, _ in trips if seconds > 0.25)
    assert slow_trips >= 1
    assert over_a_quarter(after) - over_a_quarter(before) == slow_trips
    assert after["speedtier_settle_calls_unanswered"] == 0
    queue.close()
    client.close()


def parse_metrics() -> dict[str, float]:
    """This process's settle-sender metrics of the fast tier: ``name`` (``name:le`` for a
    bucket) -> value."""
    body, _content_type = metrics.render()
    return {
        sample.name + (f":{float(sample.labels['le'])}" if "le" in sample.labels else ""): (
            sample.value
        )
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name.startswith("speedtier_settle_") and sample.labels.get("tier") == "fast"
    }
