"""Counting the reads of Flipper's table (``flipper_gates``) made by every engine of this
process, a command's own included: what a test of "one statement for every kill switch"
counts."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, event


@contextmanager
def flag_reads() -> Iterator[list[str]]:
    """The statements read from ``flipper_gates`` while inside, in order."""
    reads: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if "FROM flipper_gates" in statement:
            reads.append(statement)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield reads
    finally:
        event.remove(Engine, "before_cursor_execute", count)
