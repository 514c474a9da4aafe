"""The families services registered, looked up by request kind or by actor name."""

from __future__ import annotations

from collections.abc import Iterator

from tiers.families import Family


class Registry:
    """Holds every registered family; the router knows families only through it."""

    def __init__(self) -> None:
        self._by_kind: dict[str, Family] = {}
        self._by_name: dict[str, Family] = {}

    def add(self, family: Family) -> None:
        if family.kind in self._by_kind or family.name in self._by_name:
            raise ValueError(f"family {family.name!r} (kind {family.kind!r}) registered twice")
        self._by_kind[family.kind] = family
        self._by_name[family.name] = family

    def by_kind(self, kind: str) -> Family | None:
        return self._by_kind.get(kind)

    def by_name(self) -> dict[str, Family]:
        """Actor name -> family (a live view for the middleware)."""
        return self._by_name

    def kinds(self) -> list[str]:
        return sorted(self._by_kind)

    def __iter__(self) -> Iterator[Family]:
        return iter(self._by_name.values())

    def queues_of_tier(self, tier: str) -> list[str]:
        """Every queue a worker of ``tier`` consumes."""
        return sorted(
            queue for family in self for queue in family.queues() if queue.endswith(f".{tier}")
        )

    def pause_flags(self) -> dict[str, list[str]]:
        """Kill switch -> the names of the families it pauses, both sorted."""
        by_flag: dict[str, list[str]] = {}
        for family in sorted(self, key=lambda f: f.name):
            if family.pause_flag:
                by_flag.setdefault(family.pause_flag, []).append(family.name)
        return dict(sorted(by_flag.items()))
