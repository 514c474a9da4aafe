"""What every ``speedtier`` process sets in its environment before its libraries read it."""

from __future__ import annotations

import os


def leave_pydantic_plugins_out() -> None:
    """Pydantic looks for plugins in every installed distribution's metadata when it builds
    its first model, a part of each process's start; the platform uses none. An operator who
    sets ``PYDANTIC_DISABLE_PLUGINS`` (empty: look for them) keeps pydantic's own rule."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
