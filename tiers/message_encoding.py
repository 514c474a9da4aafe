"""A message's bytes on the wire, as ``Message.encode`` makes them, with less work per message.

``Message.encode`` walks the dataclass's fields and, with Dramatiq's JSON encoder, builds a
new ``json.JSONEncoder`` for every message (``json.dumps`` with separators), whose ``encode``
builds a new C encoder in turn. While the global encoder is Dramatiq's own JSON encoder,
:func:`encode_message` writes the same dictionary, in the same field order, with one C
encoder made once: the same bytes. It skips the circular-reference check (a message's
parameters come from a model's JSON dump and cannot refer to themselves; were one to, the
encoding would fail all the same, on the recursion limit). Any other encoder (an
application's ``dramatiq.set_encoder``) is used as it is, through ``Message.encode``.
"""

from __future__ import annotations

import dataclasses
import json
import json.encoder
from collections.abc import Callable
from typing import Any

from dramatiq.encoder import JSONEncoder
from dramatiq.message import Message, get_encoder

#: What ``json.dumps(data, separators=(",", ":"))`` uses (Dramatiq's encoder).
_JSON = json.JSONEncoder(separators=(",", ":"))


def _encoder_made_once() -> Callable[[Any], str]:
    """``_JSON.encode`` with its C encoder made once (``JSONEncoder.iterencode``'s own
    arguments, without the circular-reference markers); ``_JSON.encode`` itself where the C
    encoder is missing."""
    c_make_encoder = getattr(json.encoder, "c_make_encoder", None)  # CPython's _json
    if c_make_encoder is None:
        return _JSON.encode
    iterencode = c_make_encoder(
        None,
        _JSON.default,
        json.encoder.encode_basestring_ascii,
        _JSON.indent,
        _JSON.key_separator,
        _JSON.item_separator,
        _JSON.sort_keys,
        _JSON.skipkeys,
        _JSON.allow_nan,
    )

    def encode(data: Any) -> str:
        chunks: Any = iterencode(data, 0)
        return "".join(chunks)

    return encode


_encode = _encoder_made_once()
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
    return _encode(
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
