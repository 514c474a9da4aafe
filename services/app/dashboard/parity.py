"""The Parity page's data: every registered product's shadow runs of the bake window, grouped
per product and organization, divergences first.

The products register their sources (``ServiceContext.add_parity``); this module reads only
those, so the dashboard imports no product. A source that fails to read (Redis down, a
malformed record) is shown as unreadable, never as "no divergence".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from services.app.bootstrap import Platform
from shared.parity import ParityRun

log = logging.getLogger(__name__)

#: The bake window a rollout check looks back over (every product's is 24 hours).
BAKE_WINDOW = timedelta(hours=24)


@dataclass
class ParityGroup:
    """One product's runs for one organization (None: runs over the region)."""

    product: str
    organization_id: int | None
    runs: list[ParityRun] = field(default_factory=list)

    @property
    def diverged(self) -> int:
        return sum(1 for run in self.runs if not run.matched)


@dataclass(frozen=True)
class ParityView:
    since: datetime
    groups: list[ParityGroup]
    #: Products whose source could not be read, with why.
    unreadable: dict[str, str]
    #: Every registered product, with or without runs in the window.
    products: list[str]

    @property
    def diverged(self) -> int:
        return sum(group.diverged for group in self.groups)


def parity_view(
    platform: Platform, since: datetime | None = None, product: str | None = None
) -> ParityView:
    """The runs since ``since`` (default: the bake window) of ``product`` (default: all)."""
    start = since or datetime.now(UTC) - BAKE_WINDOW
    groups: dict[tuple[str, int | None], ParityGroup] = {}
    unreadable: dict[str, str] = {}
    for name, source in sorted(platform.parity_sources.items()):
        if product is not None and name != product:
            continue
        try:
            runs = source(start)
        except Exception as exc:  # shown on the page, never read as parity
            log.warning("dashboard: %s shadow runs unreadable: %s", name, exc)
            unreadable[name] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        for run in runs:
            key = (name, run.organization_id)
            groups.setdefault(key, ParityGroup(name, run.organization_id)).runs.append(run)
    ordered = sorted(
        groups.values(),
        key=lambda g: (-g.diverged, g.product, g.organization_id or 0),
    )
    for group in ordered:
        group.runs.sort(key=lambda run: (run.matched, -run.ran_at.timestamp()))
    return ParityView(start, ordered, unreadable, sorted(platform.parity_sources))
