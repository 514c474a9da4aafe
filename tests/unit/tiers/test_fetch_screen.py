"""A fetch's screen (``tiers.fetch_screen``): each row of its table, and a batch split into
the messages a worker can run, in their places, and the others with their fetched ids."""

from __future__ import annotations

from typing import Any

import pytest
from dramatiq.message import Message

from tiers.fetch_screen import screen, screen_fetch
from tiers.options import JOB_ID, REDIS_MESSAGE_ID

ACTORS = {"known"}


def data(actor: str = "known", **options: Any) -> bytes:
    options = {REDIS_MESSAGE_ID: "r1", JOB_ID: "j1", **options}
    return Message(
        queue_name="q.fast", actor_name=actor, args=(), kwargs={}, options=options
    ).encode()


@pytest.mark.parametrize(
    ("fetched", "fetched_id", "reason"),
    [
        (b"not a message", "r1", "undecodable message: "),
        (data(**{REDIS_MESSAGE_ID: None}), "r1", "message without a redis message id"),
        (data(), "r2", "message queued as r2 carries id r1"),
        (data(**{JOB_ID: ""}), "r1", "message without a job id (enqueue through the router)"),
        (data(actor="gone"), "r1", "no actor 'gone' in this worker"),
        (data(), "r1", ""),
        (data(), None, ""),
    ],
    ids=["undecodable", "no-redis-id", "other-id", "no-job-id", "unknown-actor", "ok", "no-id"],
)
def test_each_row_of_the_table(fetched: bytes, fetched_id: str | None, reason: str) -> None:
    message, found = screen(fetched, fetched_id, ACTORS)
    assert found.startswith(reason) and bool(found) == bool(reason)
    assert (message is None) == found.startswith("undecodable")


def test_a_batch_splits_into_runnable_messages_in_their_places_and_the_others() -> None:
    fetched = [data(), None, b"junk", data(actor="gone", **{REDIS_MESSAGE_ID: "r4"})]
    runnable, rejected = screen_fetch(fetched, ["r1", "r2", "r3", "r4"], ACTORS)
    assert [(at, m.options[REDIS_MESSAGE_ID]) for at, m in runnable] == [(0, "r1")]
    assert [(r.data, r.fetched_id) for r in rejected] == [(b"junk", "r3"), (fetched[3], "r4")]
    assert rejected[0].message is None and rejected[1].message is not None
