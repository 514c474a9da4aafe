"""One check's verdict, shared by the validation checks and the cutover gates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One check's verdict: a one-line summary, and the rows behind it."""

    passed: bool
    summary: str
    details: tuple[str, ...] = ()


def describe(rows: Sequence[Any]) -> tuple[str, ...]:
    """Each SQL row as ``column=value ...``."""
    return tuple(" ".join(f"{key}={value}" for key, value in row._mapping.items()) for row in rows)
