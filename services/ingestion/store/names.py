"""The names people give knowledge bases, documents and API keys."""

from __future__ import annotations

MAX_NAME_LENGTH = 255


def checked_name(name: str) -> str:
    """``name`` stripped. Raises ValueError when that is blank or over-long."""
    cleaned = name.strip()
    if not cleaned or len(cleaned) > MAX_NAME_LENGTH:
        raise ValueError(f"name must be 1 to {MAX_NAME_LENGTH} characters")
    return cleaned
