"""Report dates: which calendar day a report covers, resolved in the organization's zone.

The two ticks name their day with a sentinel (Rails' ``perform_later('yesterday')`` at 04:00
UTC, ``perform_later('today')`` at 20:00 UTC); a re-drive may pass a literal date instead.
A sentinel is resolved against one instant, the tick's, in each organization's own IANA
time zone, and the tick persists the resolved dates before its first external call, so a
retry that runs after a tenant's local midnight keeps the day the tick meant.

| sentinel | date |
| --- | --- |
| ``today`` | the organization's local date at the instant |
| ``yesterday`` | the day before that |
| ``YYYY-MM-DD`` | that date, for every organization |
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shared.errors import SpeedtierError

TODAY = "today"
YESTERDAY = "yesterday"
SENTINELS = (YESTERDAY, TODAY)
_LITERAL = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: Rails' ``ActiveSupport::TimeZone`` names that are not IANA names (the common ones).
_RAILS_ZONE_NAMES = {"UTC": "UTC", "Etc/UTC": "UTC"}


class BadReportDate(SpeedtierError, ValueError):
    """Neither ``yesterday``, ``today`` nor a valid ``YYYY-MM-DD``."""


def zone(name: str | None) -> ZoneInfo:
    """The organization's zone; an unknown or empty name is UTC (Rails' default)."""
    try:
        return ZoneInfo(_RAILS_ZONE_NAMES.get(name or "UTC", name or "UTC"))
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def parse_day(text: str) -> str | date:
    """A sentinel as given, or a literal date.

    Raises:
      BadReportDate: anything else.
    """
    if text in SENTINELS:
        return text
    if not _LITERAL.match(text):
        raise BadReportDate(f"expected yesterday, today or YYYY-MM-DD, got {text!r}")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise BadReportDate(f"not a calendar date: {text!r}") from None


def resolve(day: str | date, time_zone: str | None, instant: datetime) -> date:
    """The date ``day`` means for an organization in ``time_zone`` at ``instant`` (aware)."""
    if isinstance(day, date):
        return day
    local_today = instant.astimezone(zone(time_zone)).date()
    if day == TODAY:
        return local_today
    if day == YESTERDAY:
        return local_today - timedelta(days=1)
    raise BadReportDate(f"unknown sentinel {day!r}")


def local_day_bounds(day: date, time_zone: str | None) -> tuple[datetime, datetime]:
    """The UTC instants ``[start, end)`` of ``day`` in ``time_zone`` (23, 24 or 25 hours
    long across a DST change)."""
    tz = zone(time_zone)
    start = datetime.combine(day, time.min, tzinfo=tz).astimezone(UTC)
    end = datetime.combine(day + timedelta(days=1), time.min, tzinfo=tz).astimezone(UTC)
    return start, end


def tick_sentinel(instant: datetime) -> str:
    """The sentinel a tick fired at ``instant`` reports on: before noon UTC (the 04:00
    tick) yesterday, after it (the 20:00 tick) today."""
    return YESTERDAY if instant.astimezone(UTC).hour < 12 else TODAY
