"""A message's bytes on the wire, as ``Message.encode`` makes them, with less work per message.

``Message.encode`` walks the dataclass's fields and, with Dramatiq's JSON encoder, builds a
new ``json.JSONEncoder`` for every message (``json.dumps`` with separators). While the global
encoder is Dramatiq's own JSON encoder, :func:`encode_message` writes the same dictionary, in
the same field order, with one encoder made once: the same bytes. Any other encoder (an
application's ``dramatiq.set_encoder``) is used as it is, through ``Message.encode``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from dramatiq.encoder import JSONEncoder
from dramatiq.message import Message, get_encoder

#: What ``json.dumps(data, separators=(",", ":"))`` builds per call (Dramatiq's encoder).
_JSON = json.JSONEncoder(separators=(",", ":"))
#: The fields written below, in ``Message.asdict``'s order; another Dramatiq's message with
#: other fields is encoded by ``Message.encode``.
_FIELDS = (
    "queue_name",
    "actor_name",
    "args",
    "kwargs",
    "options",
    "message_id",
    "message_timestamp",
)
_SAME_FIELDS = tuple(field.name for field in dataclasses.fields(Message)) == _FIELDS


def encode_message(message: Message[Any]) -> bytes:
    """The bytes ``message.encode()`` returns."""
    if not _SAME_FIELDS or type(get_encoder()) is not JSONEncoder:
        return message.encode()
    return _JSON.encode(
        {
            "queue_name": message.queue_name,
            "actor_name": message.actor_name,
            "args": message.args,
            "kwargs": message.kwargs,
            "options": message.options,
            "message_id": message.message_id,
            "message_timestamp": message.message_timestamp,
        }
    ).encode("utf-8")
