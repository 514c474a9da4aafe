"""A kill switch that cannot be read (PostgreSQL down) delays every job of its family, and
says so once per outage, not once per job."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from tiers.families import Family
from tiers.middleware.held import Held
from tiers.middleware.pause import PauseSwitch

FLAG = "pause_api2_t_outage"


class ItemParams(BaseModel):
    item: str


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_unreadable_switch_warns_once_per_outage_and_once_when_read_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    family = Family(
        name="t_outage",
        kind="t_outage_kind",
        handler=lambda organization_id, item: None,
        params=ItemParams,
        job_id=lambda o, p: f"o-{p.item}",
        fixed_tier="fast",
        pause_flag=FLAG,
    )
    reachable = [False]

    def is_enabled(flag: str) -> bool:
        if not reachable[0]:
            raise ConnectionError("flipper table unreachable")
        return False

    switch = PauseSwitch({family.name: family}, is_enabled)
    message = SimpleNamespace(actor_name=family.name, options={})
    caplog.set_level(logging.DEBUG, logger="tiers.middleware.pause")
    # Given 50 jobs of the family tried while the switch cannot be read: each is held back
    for _ in range(50):
        with pytest.raises(Held):
            switch.before_process_message(None, message)  # type: ignore[arg-type]
    # Then one warning names the switch and the outage
    assert len(warnings(caplog)) == 1
    assert f"kill switch {FLAG} unreadable" in warnings(caplog)[0]
    # When it is read again: one warning with the count, and no more after that
    reachable[0] = True
    switch.before_process_message(None, message)  # type: ignore[arg-type]
    switch.before_process_message(None, message)  # type: ignore[arg-type]
    assert len(warnings(caplog)) == 2
    assert f"kill switch {FLAG} read again after 50 failed attempt(s)" in warnings(caplog)[1]
