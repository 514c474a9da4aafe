"""The call an upload describes, read from ``conversation_uploads.metadata``.

Each provider names the same facts differently; the processor needs the call's id (the
conversation's ``external_id``), and reads the agent (email, provider id, name), the
customer (phone, email, name), the direction, the start time and the two numbers when
present. A missing call id, a non-object agent/customer, or an unparseable start time is
``MetadataInvalid`` (terminal).

| fact | xcally | outreach_kaia |
| --- | --- | --- |
| call id | ``uniqueid`` | ``call_id`` |
| agent (``email``, ``id``, ``name``) | ``agent`` | ``user`` |
| customer (``phone``, ``email``, ``name``) | ``customer`` | ``prospect`` |
| started at | ``start_time`` | ``started_at`` |
| from / to | ``caller_number`` / ``called_number`` | ``from`` / ``to`` |

Both read ``direction`` (``inbound``/``outbound``) and ``filename``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from services.uploads.errors import metadata_invalid

NATIVE_SOURCES = ("xcally", "outreach_kaia")

_KEYS: dict[str, dict[str, str]] = {
    "xcally": {
        "call_id": "uniqueid",
        "agent": "agent",
        "customer": "customer",
        "started_at": "start_time",
        "from": "caller_number",
        "to": "called_number",
    },
    "outreach_kaia": {
        "call_id": "call_id",
        "agent": "user",
        "customer": "prospect",
        "started_at": "started_at",
        "from": "from",
        "to": "to",
    },
}


@dataclass(frozen=True)
class Person:
    email: str | None = None
    external_id: str | None = None
    name: str | None = None
    phone: str | None = None


@dataclass(frozen=True)
class CallRecord:
    source: str
    call_id: str
    agent: Person
    customer: Person
    direction: str | None
    started_at: datetime | None
    from_number: str | None
    to_number: str | None
    filename: str | None


def _text(value: Any, field: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise metadata_invalid(f"{field} must be text, got {type(value).__name__}")
    return str(value).strip() or None


def _person(value: Any, field: str) -> Person:
    if value is None:
        return Person()
    if not isinstance(value, dict):
        raise metadata_invalid(f"{field} must be an object")
    email = _text(value.get("email"), f"{field}.email")
    return Person(
        email=email.lower() if email else None,
        external_id=_text(value.get("id"), f"{field}.id"),
        name=_text(value.get("name"), f"{field}.name"),
        phone=_text(value.get("phone"), f"{field}.phone"),
    )


def _moment(value: Any, field: str) -> datetime | None:
    text = _text(value, field)
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise metadata_invalid(f"{field} is not an ISO 8601 time: {text!r}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def call_record(source: str, metadata: Any) -> CallRecord:
    """The call ``metadata`` of a ``source`` upload describes."""
    keys = _KEYS.get(source)
    if keys is None:
        raise metadata_invalid(f"source {source!r} is not processed natively")
    if not isinstance(metadata, dict):
        raise metadata_invalid("metadata must be an object")
    call_id = _text(metadata.get(keys["call_id"]), keys["call_id"])
    if call_id is None:
        raise metadata_invalid(f"{keys['call_id']} (the call id) is missing")
    direction = _text(metadata.get("direction"), "direction")
    if direction is not None and direction not in ("inbound", "outbound"):
        raise metadata_invalid(f"direction must be inbound or outbound, got {direction!r}")
    return CallRecord(
        source=source,
        call_id=call_id,
        agent=_person(metadata.get(keys["agent"]), keys["agent"]),
        customer=_person(metadata.get(keys["customer"]), keys["customer"]),
        direction=direction,
        started_at=_moment(metadata.get(keys["started_at"]), keys["started_at"]),
        from_number=_text(metadata.get(keys["from"]), keys["from"]),
        to_number=_text(metadata.get(keys["to"]), keys["to"]),
        filename=_text(metadata.get("filename"), "filename"),
    )
