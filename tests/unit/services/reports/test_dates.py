"""Report dates resolve in each organization's zone at the tick's instant, across DST
changes and midnight, and a persisted tick plan never moves with the retry's clock."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.reports.dates import (
    BadReportDate,
    local_day_bounds,
    parse_day,
    resolve,
    tick_sentinel,
)
from services.reports.ticks import tick_plan

ZONES = [
    "UTC",
    "America/New_York",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "America/Santiago",
    "Europe/London",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Auckland",
    "Pacific/Chatham",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
    "Asia/Beirut",
]
instants = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)
# Tick instants on the minute (what slots carry), including the hours of DST changes.
ticks = st.builds(
    lambda d, hour: datetime(d.year, d.month, d.day, hour, tzinfo=UTC),
    st.dates(min_value=date(2020, 1, 1), max_value=date(2030, 12, 31)),
    st.sampled_from([4, 20]),
)


@given(instant=instants, name=st.sampled_from(ZONES))
def test_today_is_the_local_date_and_its_day_contains_the_instant(
    instant: datetime, name: str
) -> None:
    today = resolve("today", name, instant)
    assert today == instant.astimezone(ZoneInfo(name)).date()
    start, end = local_day_bounds(today, name)
    assert start <= instant < end
    assert timedelta(hours=22) <= end - start <= timedelta(hours=25)
    assert resolve("yesterday", name, instant) == today - timedelta(days=1)


@given(instant=ticks, name=st.sampled_from(ZONES))
def test_a_tick_resolves_from_its_slot_not_from_the_retry_clock(
    instant: datetime, name: str
) -> None:
    slot = instant.strftime("%Y-%m-%dT%H:%MZ")
    sentinel = tick_sentinel(instant)
    day, at = tick_plan(slot, sentinel, now=instant + timedelta(hours=30))
    assert at == instant  # a retry a day later still resolves at the tick's instant
    assert resolve(day, name, at) == resolve(sentinel, name, instant)
    # the 04:00 tick covers yesterday, the 20:00 tick today
    assert sentinel == ("yesterday" if instant.hour == 4 else "today")


def test_dst_days_are_23_and_25_hours_long() -> None:
    spring, autumn = date(2026, 3, 8), date(2026, 11, 1)
    for day, hours in ((spring, 23), (autumn, 25)):
        start, end = local_day_bounds(day, "America/New_York")
        assert end - start == timedelta(hours=hours)


def test_midnight_belongs_to_the_new_day() -> None:
    midnight = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)  # 00:00 in New York
    assert resolve("today", "America/New_York", midnight) == date(2026, 12, 1)
    assert resolve("today", "America/New_York", midnight - timedelta(microseconds=1)) == date(
        2026, 11, 30
    )


def test_a_redrive_slot_names_its_day_and_resolves_now() -> None:
    now = datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert tick_plan("redrive-today-1764579600", "yesterday", now) == ("today", now)
    assert tick_plan("redrive-2026-11-29-1", "today", now) == (date(2026, 11, 29), now)


@pytest.mark.parametrize("text", ["tomorrow", "2026-13-01", "2026-02-30", "", "2026/11/30"])
def test_bad_days_are_refused(text: str) -> None:
    with pytest.raises(BadReportDate):
        parse_day(text)


def test_an_unknown_zone_is_utc() -> None:
    instant = datetime(2026, 12, 1, 23, tzinfo=UTC)
    assert resolve("today", "Mars/Olympus", instant) == date(2026, 12, 1)
