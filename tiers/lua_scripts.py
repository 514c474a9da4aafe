"""The platform's Lua scripts (``tiers/lua/*.lua``), each sent with the shared prelude
(``_prelude.lua``: the key layout and the helpers every script uses) in front of it."""

from __future__ import annotations

from importlib import resources


def load_script(name: str) -> str:
    """The source of ``tiers/lua/<name>.lua``, prelude included."""
    base = resources.files("tiers") / "lua"
    prelude = (base / "_prelude.lua").read_text()
    return prelude + "\n" + (base / f"{name}.lua").read_text()
