"""The platform's Lua scripts (``tiers/lua/*.lua``), each sent with the shared preludes in
front of it (Redis scripts cannot import): ``_prelude.lua`` (the key layout, the queue and
parked-list helpers), ``_fair.lua`` (the fair order of grouped messages) and ``_slots.lua``
(group slots and claims)."""

from __future__ import annotations

from importlib import resources

#: The helpers sent in front of every script, in this order.
PRELUDES = ("_prelude.lua", "_fair.lua", "_slots.lua")


def load_script(name: str) -> str:
    """The source of ``tiers/lua/<name>.lua``, prelude included."""
    base = resources.files("tiers") / "lua"
    parts = [*PRELUDES, f"{name}.lua"]
    return "\n".join((base / part).read_text() for part in parts)
