"""Message option keys keep their wire values; ``family_of`` finds a message's family (no I/O)."""

from __future__ import annotations

from dramatiq.message import Message
from pydantic import BaseModel

from tiers import options
from tiers.families import Family, family_of


def test_wire_keys_are_those_messages_already_in_redis_carry() -> None:
    # Changing one strands every message already queued or delayed under the old key.
    assert {
        "JOB_ID": options.JOB_ID,
        "ORGANIZATION": options.ORGANIZATION,
        "GROUP": options.GROUP,
        "GROUP_CAP": options.GROUP_CAP,
        "KEEP_FINISHED": options.KEEP_FINISHED,
        "PROVIDER": options.PROVIDER,
        "WINDOW_SCOPE": options.WINDOW_SCOPE,
        "FAILURES": options.FAILURES,
        "WINDOW_RESERVATION": options.WINDOW_RESERVATION,
        "WINDOW_ADMITTED": options.WINDOW_ADMITTED,
        "REDIS_MESSAGE_ID": options.REDIS_MESSAGE_ID,
        "ETA": options.ETA,
    } == {
        "JOB_ID": "st_job",
        "ORGANIZATION": "st_org",
        "GROUP": "st_group",
        "GROUP_CAP": "st_cap",
        "KEEP_FINISHED": "st_keep",
        "PROVIDER": "st_provider",
        "WINDOW_SCOPE": "st_scope",
        "FAILURES": "st_failures",
        "WINDOW_RESERVATION": "st_wres",
        "WINDOW_ADMITTED": "st_window",
        "REDIS_MESSAGE_ID": "redis_message_id",
        "ETA": "eta",
    }


class _Params(BaseModel):
    pass


def _message(actor_name: str) -> Message[object]:
    return Message(queue_name="q.fast", actor_name=actor_name, args=(), kwargs={}, options={})


def test_family_of_is_the_family_named_by_the_actor() -> None:
    family = Family(
        name="t_plain", kind="plain", handler=print, params=_Params, job_id=lambda o, p: "x"
    )
    families = {"t_plain": family}
    assert family_of(_message("t_plain"), families) is family
    assert family_of(_message("no_such_actor"), families) is None
