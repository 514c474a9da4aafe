"""Platform upkeep that calls no provider: runs on the maintenance tier."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.maintenance.ticks import group_slot_reaper

if TYPE_CHECKING:
    from router.context import ServiceContext


def register(platform: ServiceContext) -> None:
    platform.add_tick(group_slot_reaper(platform.broker.jobs))
