"""The fair order of a queue's grouped jobs (tiers/lua/_fair.lua): a newly active
organization's first job is fetched before every busy organization's waiting jobs, and busy
organizations share the workers by the run time their jobs use, not by their number."""

from __future__ import annotations

import json
from collections import Counter

import redis

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.fair_order import fair_key

QUEUE = "t_group.fast"


def backlog(orgs: range, each: int, sleep: float = 0.0) -> list[JobRequest]:
    """``each`` jobs per organization, interleaved as many clients sending at once would."""
    return [
        JobRequest("t_group", org, {"item": f"busy-{org}-{i}", "sleep": sleep})
        for i in range(each)
        for org in orgs
    ]


def fetch_one(broker: TierBroker) -> str:
    """The item of the next message a worker's fetch takes from the queue."""
    datas = broker.jobs.fetch_and_claim(QUEUE, broker.broker_id, 1, list(broker.actors)).data
    (data,) = datas
    assert data is not None
    item: str = json.loads(data)["kwargs"]["item"]
    return item


def test_a_new_organizations_job_goes_before_every_busy_organizations_backlog(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given 50 organizations with 6 jobs each (cap 2: 100 admitted, 200 parked)
    router.enqueue_many(backlog(range(1, 51), 6))
    assert redis_client.zcard(fair_key(namespace, QUEUE)) == 100
    # When a new organization enqueues one job
    router.enqueue(JobRequest("t_group", 999, {"item": "new"}))
    # Then it is the next one fetched, ahead of the busy organizations' first jobs too
    assert fetch_one(broker) == "new"
    # And the busy organizations follow in turn: one job each before anyone's second
    firsts = Counter(fetch_one(broker).split("-")[1] for _ in range(50))
    assert set(firsts.values()) == {1}


def test_the_fair_order_holds_its_messages_alone_in_the_skiplist_encoding(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given 5 organizations with 3 jobs each (cap 2: 10 admitted, 5 parked)
    router.enqueue_many(backlog(range(1, 6), 3))
    fair = fair_key(namespace, QUEUE)
    # Then the fair order holds exactly the admitted messages, in the encoding where an added
    # message's place is found without parsing the scores before it
    records = [broker.jobs.record(f"group-busy-{org}-{i}") for org in range(1, 6) for i in (0, 1)]
    admitted = {str(record["cur"]) for record in records if record}
    assert len(admitted) == 10
    assert {member.decode() for member in redis_client.zrange(fair, 0, -1)} == admitted
    assert redis_client.object("encoding", fair) == b"skiplist"
    # And so it stays as fetches take messages and settles admit the parked ones
    assert fetch_one(broker).startswith("busy-")
    assert redis_client.zcard(fair) == 9
    assert redis_client.object("encoding", fair) == b"skiplist"


def test_an_organization_that_ran_on_an_idle_system_is_new_again_behind_a_backlog(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given organization 999 whose job ran while nothing else waited
    router.enqueue(JobRequest("t_group", 999, {"item": "earlier", "sleep": 0.05}))
    with h.running_worker(broker, threads=1):
        h.wait_until(lambda: h.state(broker, "group-earlier") == "completed")
    # When 50 organizations queue a backlog, then 999 sends its next job
    router.enqueue_many(backlog(range(1, 51), 4))
    router.enqueue(JobRequest("t_group", 999, {"item": "later"}))
    # Then the run time it used alone is owed to nobody: its job goes first
    assert fetch_one(broker) == "later"


def test_busy_organizations_share_a_worker_by_run_time_not_by_count(
    router: Router, broker: TierBroker, redis_client: redis.Redis, namespace: str
) -> None:
    # Given two organizations with a backlog each, one's jobs ten times longer (50 ms, 5 ms),
    # under a cap (8) that leaves the worker a choice between them
    long = [JobRequest("t_wide", 1, {"item": f"long-{i}", "sleep": 0.05}) for i in range(40)]
    short = [JobRequest("t_wide", 2, {"item": f"short-{i}", "sleep": 0.005}) for i in range(40)]
    router.enqueue_many([job for pair in zip(long, short, strict=True) for job in pair])

    def ended() -> int:
        return sum(1 for e in h.trace(redis_client, namespace) if e["ev"] == "end")

    # When one worker thread serves them for a while
    with h.running_worker(broker, threads=1):
        h.wait_until(lambda: ended() >= 52, timeout=30)
    order = [e["org"] for e in h.trace(redis_client, namespace) if e["ev"] == "start"]
    # Then after each organization's first cap's worth (admitted before any run was
    # measured, in turn), the short jobs' organization got many more starts: about ten to
    # one by run time, where round robin by count gives one to one; and neither starved
    later = Counter(order[16:52])
    assert later[2] >= 3 * later[1]
    assert later[1] >= 1
