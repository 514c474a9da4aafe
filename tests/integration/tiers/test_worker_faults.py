"""A stalled worker, a job that kills its worker, a message whose id is not the one it was
queued under, and a dead worker's return time: real worker processes on the real Redis."""

from __future__ import annotations

import json
import os
import signal
import time

import redis
from dramatiq.message import Message

from router.enqueue import Router
from router.registry import Registry
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.dead_letters import DeadLetters
from tiers.fair_order import ready_count
from tiers.middleware.job_metrics import JOBS
from tiers.options import JOB_ID, REDIS_MESSAGE_ID

QUEUE = "t_plain.fast"
TIMEOUT_MS = 1000
POLL_S = 0.05


def make_router(broker: TierBroker) -> Router:
    registry = Registry()
    for family in h.families().values():
        registry.add(family)
    return Router(registry, broker)


def request(item: str, **params: object) -> JobRequest:
    return JobRequest(kind="t_plain", organization_id=1, params={"item": item, **params})


def count(client: redis.Redis, key: str) -> int:
    return int(client.get(key) or 0)


def starts(client: redis.Redis, namespace: str) -> list[dict[str, object]]:
    return [e for e in h.trace(client, namespace) if e["ev"] == "start"]


def acked_anywhere(client: redis.Redis, namespace: str, redis_id: str) -> list[str]:
    return [
        key.decode()
        for key in client.scan_iter(f"{namespace}:__acks__.*")
        if client.sismember(key, redis_id)
    ]


def test_a_stalled_worker_resumed_completes_nothing_that_completed_elsewhere(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace, heartbeat_timeout_ms=TIMEOUT_MS)
    items = [f"s{i}" for i in range(6)]
    make_router(broker).enqueue_many([request(i, mode="fenced", sleep=1.5) for i in items])
    # Given a worker process running two jobs and holding prefetched ones
    stalled = h.start_worker_process(
        redis_url, namespace, threads=2, heartbeat_timeout_ms=TIMEOUT_MS
    )
    assert stalled.pid is not None
    h.wait_until(lambda: len(starts(redis_client, namespace)) == 2, timeout=30)
    held_by_it = {e["job"] for e in starts(redis_client, namespace)}
    # When it stalls past its heartbeat timeout while another worker takes its jobs over
    os.kill(stalled.pid, signal.SIGSTOP)
    try:
        with h.running_worker(broker, threads=4):
            h.wait_until(
                lambda: all(count(redis_client, f"{namespace}:done:{i}") for i in items),
                timeout=30,
            )
            # and then resumes, with its frozen runs and prefetched copies
            os.kill(stalled.pid, signal.SIGCONT)
            time.sleep(3.0)
    finally:
        os.kill(stalled.pid, signal.SIGCONT)
        stalled.terminate()
        stalled.join(timeout=20)
    # Then every job completed once: the frozen runs' effects and settles were refused, and
    # no prefetched copy ran
    assert {i: count(redis_client, f"{namespace}:done:{i}") for i in items} == dict.fromkeys(
        items, 1
    )
    for item in items:
        job = f"plain-{item}"
        expected_runs = 2 if job in held_by_it else 1
        assert count(redis_client, f"{namespace}:runs:{item}") == expected_runs, item
        record = broker.jobs.record(job)
        assert record is not None
        assert (record["state"], record["attempts"]) == ("completed", "1"), item
    broker.close()


def replace_dying_workers(
    broker: TierBroker, redis_url: str, namespace: str, job: str, *, workers: int, threads: int
) -> None:
    """Start worker processes one after the other, each once the last one died, until
    ``job`` failed or ``workers`` were started."""
    for _ in range(workers):
        worker = h.start_worker_process(
            redis_url, namespace, threads=threads, heartbeat_timeout_ms=TIMEOUT_MS
        )
        try:
            h.wait_until(
                lambda w=worker: w.exitcode is not None or h.state(broker, job) == "failed",
                timeout=30,
            )
        finally:
            if worker.exitcode is None:
                worker.terminate()
            worker.join(timeout=20)
        if h.state(broker, job) == "failed":
            return


def test_a_job_that_kills_its_worker_at_once_still_ends(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace, heartbeat_timeout_ms=TIMEOUT_MS)
    make_router(broker).enqueue(request("q", mode="exit"))
    # Given a job that kills its worker process the moment it runs (its first start may not
    # have left the worker: that death is not counted, and its next delivery, found active,
    # waits for its start), each dead worker replaced
    replace_dying_workers(broker, redis_url, namespace, "plain-q", workers=8, threads=2)
    # Then it fails as worker_died after three counted deaths, in at most one run more
    record = broker.jobs.record("plain-q")
    assert record is not None and record["state"] == "failed"
    assert record["last_error"].startswith("worker_died: 3 run(s)")
    assert count(redis_client, f"{namespace}:runs:q") in (3, 4)
    broker.close()


def test_a_job_that_kills_its_worker_every_time_fails_as_worker_died_after_three_runs(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace, heartbeat_timeout_ms=TIMEOUT_MS)
    beside = [f"b{i}" for i in range(3)]
    make_router(broker).enqueue_many(
        [request(i, sleep=0.5) for i in beside] + [request("p", mode="exit", sleep=0.2)]
    )
    # Given a job that kills its worker process each time it runs (0.2 s in, once the three
    # fetched with it are running), fetched and run with three others; each dead worker is
    # replaced
    replace_dying_workers(broker, redis_url, namespace, "plain-p", workers=6, threads=4)
    with h.running_worker(broker):
        h.wait_until(
            lambda: all(h.state(broker, f"plain-{i}") == "completed" for i in beside), timeout=30
        )
    # Then after three runs that never settled the job is failed and dead-lettered
    record = broker.jobs.record("plain-p")
    assert record is not None
    assert record["state"] == "failed"
    assert record["last_error"].startswith("worker_died")
    assert count(redis_client, f"{namespace}:runs:p") == 3
    letters = DeadLetters(broker.jobs).latest([QUEUE])
    assert [(letter.job_id, letter.actionable) for letter in letters] == [("plain-p", True)]
    assert acked_anywhere(redis_client, namespace, record["cur"]) == []
    assert ready_count(redis_client, namespace, QUEUE) == 0
    # and the jobs that died beside it once ran alone next time, and completed
    for item in beside:
        died_beside = broker.jobs.record(f"plain-{item}")
        assert died_beside is not None
        assert (died_beside["state"], died_beside["unsettled"]) == ("completed", "1"), item
    # and an operator's retry gives the failed job its runs back
    assert DeadLetters(broker.jobs).retry("plain-p", "ops") == "waiting"
    retried = broker.jobs.record("plain-p")
    assert retried is not None
    assert "unsettled" not in retried
    broker.close()


def test_a_message_carrying_another_id_than_its_queued_one_is_dead_lettered_under_that_one(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace)
    message = Message(
        queue_name=QUEUE,
        actor_name="t_plain",
        args=(),
        kwargs={"organization_id": 1, "item": "m"},
        options={JOB_ID: "plain-m", REDIS_MESSAGE_ID: "embedded-id"},
    )
    # Given a raw message queued under one id whose data carries another
    redis_client.hset(f"{namespace}:{QUEUE}.msgs", "queued-id", message.encode())
    redis_client.rpush(f"{namespace}:{QUEUE}", "queued-id")
    # When a worker fetches it
    with h.running_worker(broker):
        h.wait_until(
            lambda: redis_client.zscore(f"{namespace}:{QUEUE}.XQ", "queued-id") is not None
        )
        time.sleep(0.3)
    # Then it is dead-lettered under the id it was queued under, and no ack set keeps it
    assert acked_anywhere(redis_client, namespace, "queued-id") == []
    assert redis_client.hget(f"{namespace}:{QUEUE}.msgs", "queued-id") is None
    assert ready_count(redis_client, namespace, QUEUE) == 0
    assert count(redis_client, f"{namespace}:runs:m") == 0
    broker.close()


def test_a_dead_workers_job_returns_within_the_heartbeat_timeout_and_a_poll(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace, heartbeat_timeout_ms=TIMEOUT_MS)
    make_router(broker).enqueue(request("d", sleep=2.0))
    dying = h.start_worker_process(redis_url, namespace, threads=1, heartbeat_timeout_ms=TIMEOUT_MS)
    assert dying.pid is not None
    h.wait_until(lambda: len(starts(redis_client, namespace)) == 1, timeout=30)
    # Given a worker killed while running a job, and another worker
    os.kill(dying.pid, signal.SIGKILL)
    killed = time.time()
    dying.join(timeout=10)
    with h.running_worker(broker, poll_ms=int(POLL_S * 1000)):
        h.wait_until(lambda: len(starts(redis_client, namespace)) == 2, timeout=30)
        h.wait_until(lambda: h.state(broker, "plain-d") == "completed", timeout=30)
    # Then the job started again within the heartbeat timeout plus a poll (and a margin for
    # a loaded machine): the bound of the mechanism, not a speed figure
    second = json.loads(json.dumps(starts(redis_client, namespace)[1]))
    returned_after = float(second["t"]) - killed
    assert returned_after < TIMEOUT_MS / 1000 + POLL_S + 1.5, returned_after
    broker.close()


def test_a_start_sent_again_after_its_reply_was_lost_counts_nothing(
    redis_url: str, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace)
    make_router(broker).enqueue(request("r"))
    [message] = broker.fetch_messages(QUEUE, 10)

    def start(start_id: str) -> tuple[str, str]:
        return broker.jobs.start(
            message,
            QUEUE,
            broker.broker_id,
            max_unsettled=3,
            retention_seconds=60,
            start_id=start_id,
        )

    # Given a run started once
    assert start("first") == ("run", "1")
    # When the same start is sent again (its reply lost), it answers as before
    assert start("first") == ("run", "1")
    record = broker.jobs.record("plain-r")
    assert record is not None and "unsettled" not in record
    # while another start finds that run died: the job is a suspect, and runs alone
    assert start("second") == ("suspect", "1")
    broker.close()


def test_a_job_failed_as_worker_died_is_counted_in_the_jobs_metric(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace)
    make_router(broker).enqueue(request("w"))
    # Given a record as two runs that died leave it (the next start counts the second death)
    redis_client.hset(
        broker.jobs.record_key("plain-w"), mapping={"epoch": 2, "open": "x", "unsettled": 2}
    )
    counted = JOBS.labels("t_plain", "fast", "worker_died")
    before = counted._value.get()
    # When a worker takes it
    with h.running_worker(broker):
        h.wait_until(lambda: h.state(broker, "plain-w") == "failed")
    # Then it failed without running, and the metric counts it
    assert count(redis_client, f"{namespace}:runs:w") == 0
    assert counted._value.get() == before + 1
    broker.close()


def test_a_settle_carrying_an_older_epoch_is_refused_and_an_unfenced_record_accepts_any(
    redis_url: str, redis_client: redis.Redis, namespace: str
) -> None:
    broker = h.make_broker(redis_url, namespace)
    make_router(broker).enqueue_many([request("old"), request("older")])
    fetched = {m.options[JOB_ID]: m for m in broker.fetch_messages(QUEUE, 10)}
    record = broker.jobs.record_key

    def settle(job_id: str, epoch: str) -> str:
        return broker.jobs.settle(
            fetched[job_id], state="completed", retention_seconds=60, epoch=epoch
        )

    # Given a job whose run 1 was delivered again and started as run 2 elsewhere
    redis_client.hset(record("plain-old"), mapping={"epoch": 2, "open": "elsewhere"})
    # Then run 1's settle is refused, and the record is left as run 2 holds it
    assert settle("plain-old", "1") == "stale"
    assert redis_client.hmget(record("plain-old"), "state", "open", "attempts") == [
        b"active",
        b"elsewhere",
        b"0",
    ]
    # and run 2's settle lands
    assert settle("plain-old", "2") == "ok"
    assert redis_client.hget(record("plain-old"), "open") is None
    # Given a record no start of this version touched (no epoch: written by an older one)
    # Then a settle is not fenced, as before
    assert settle("plain-older", "3") == "ok"
    assert redis_client.hget(record("plain-older"), "state") == b"completed"
    broker.close()
