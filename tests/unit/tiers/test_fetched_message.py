"""A fetched message's proxy reads as Dramatiq's does: the same fields (the same objects,
so an option set through the proxy is the message's), failure and exception state of its
own."""

from __future__ import annotations

import dataclasses

from dramatiq.broker import MessageProxy
from dramatiq.message import Message

from tiers.consumer import FetchedMessage


def test_every_field_reads_as_through_dramatiqs_proxy() -> None:
    message = Message(
        queue_name="q.fast", actor_name="a", args=(1,), kwargs={"k": 2}, options={"st_job": "j"}
    )
    fetched, plain = FetchedMessage(message), MessageProxy(message)
    for field in dataclasses.fields(Message):
        assert getattr(fetched, field.name) is getattr(plain, field.name)
    fetched.options["eta"] = 5
    assert message.options["eta"] == 5
    assert fetched == plain and str(fetched) == str(plain)
    fetched.fail()
    assert fetched.failed and not plain.failed
