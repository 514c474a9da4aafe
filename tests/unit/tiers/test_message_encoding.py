"""``encode_message`` writes the bytes ``Message.encode`` writes, with Dramatiq's JSON encoder
and with any other one an application sets (no I/O)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import dramatiq
import pytest
from dramatiq.encoder import PickleEncoder
from dramatiq.message import Message

from tiers.message_encoding import encode_message

MESSAGES = [
    Message(queue_name="q.fast", actor_name="a", args=(), kwargs={}, options={}),
    Message(
        queue_name="b_noop.fast",
        actor_name="b_noop",
        args=(1, "two", [3.5, None]),
        kwargs={"organization_id": 7, "item": 'héllo 🙂 "quoted" \\ \n', "n": 2**70},
        options={"st_job": "noop-1", "st_cap": 5, "st_keep": True, "redis_message_id": "r"},
    ),
    Message(
        queue_name="x.slow.DQ",
        actor_name="x",
        args=(),
        kwargs={"nested": {"a": [1, {"b": False}], "inf": float("-inf"), "x": 0.1 + 0.2}},
        options={"eta": 1_700_000_000_000},
        message_id="fixed-id",
        message_timestamp=1,
    ),
]


@pytest.fixture
def pickle_encoder() -> Iterator[None]:
    previous = dramatiq.get_encoder()
    dramatiq.set_encoder(PickleEncoder())
    yield
    dramatiq.set_encoder(previous)


@pytest.mark.parametrize("message", MESSAGES)
def test_the_bytes_are_those_of_message_encode(message: Message[Any]) -> None:
    assert encode_message(message) == message.encode()


def test_a_message_refusing_json_is_refused_alike() -> None:
    message = Message(queue_name="q", actor_name="a", args=(), kwargs={"x": {1, 2}}, options={})
    with pytest.raises(TypeError):
        message.encode()
    with pytest.raises(TypeError):
        encode_message(message)


@pytest.mark.parametrize("message", MESSAGES)
def test_another_encoder_is_used_as_it_is(pickle_encoder: None, message: Message[Any]) -> None:
    assert encode_message(message) == message.encode()
    assert Message.decode(encode_message(message)) == message
