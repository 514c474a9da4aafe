"""A router-built message's id is what Dramatiq's ``generate_unique_id`` gives: the text of a
random version 4 UUID, a new one each time (no I/O)."""

from __future__ import annotations

import uuid

from router.enqueue import new_message_id


def test_an_id_is_the_text_of_a_random_uuid4() -> None:
    for _ in range(2_000):
        text = new_message_id()
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_ids_do_not_repeat() -> None:
    ids = [new_message_id() for _ in range(20_000)]
    assert len(set(ids)) == len(ids)
