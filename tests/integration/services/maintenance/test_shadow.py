"""Shadow runs of the native counter repairs around Rails' ``#fix``: each step with a native
repair is measured read-only before and after Rails' call, never repaired here; ``speedtier
maintenance parity`` reports the runs and ``maintenance check`` fails while any diverged."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.maintenance import checks, store
from services.maintenance.cli import maintenance
from services.maintenance.families import COUNTER_CACHE_FIX_JOB_ID
from shared.db.engine import session_scope
from shared.db.models.rails_routine import Group, GroupEmployee
from shared.rollouts import COUNTER_CACHE_NATIVE_REPAIRS_SHADOW
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.maintenance.factories import (
    FAST_RETRIES,
    RAILS_TOKEN,
    running_workers,
)
from tests.platform_harness import wait_until


@pytest.fixture
def shadowed(make_platform: MakePlatform, rails: RailsServer) -> Platform:
    return make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        retries=FAST_RETRIES,
        flag_overrides={COUNTER_CACHE_NATIVE_REPAIRS_SHADOW: True},
        region="eu-central-1",
    )


@pytest.fixture
def drifted_group(shadowed: Platform) -> Iterator[int]:
    """A group whose counter says 5 while it has 2 employees."""
    with session_scope(shadowed.sessions) as session:
        group = Group(group_employees_count=5)
        session.add(group)
        session.flush()
        session.add_all([GroupEmployee(group_id=group.id), GroupEmployee(group_id=group.id)])
        session.commit()
        group_id = group.id
    try:
        yield group_id
    finally:
        with session_scope(shadowed.sessions) as session:
            session.execute(
                text("DELETE FROM group_employees WHERE group_id = :g"), {"g": group_id}
            )
            session.execute(text("DELETE FROM groups WHERE id = :g"), {"g": group_id})
            session.commit()


def _rails_repairs(platform: Platform, extra: int = 0) -> Callable[[str], int]:
    """Rails' #fix played on the database: its counter definition, ``extra`` off the native
    one for group_employees (a Rails counter that counts something else)."""

    def fix(step: str) -> int:
        if step not in store.NATIVE_COUNTERS:
            return 0
        with session_scope(platform.sessions) as session:
            fixed = store.repair_counter(session, step)
            if extra and step == "group_employees":
                session.execute(
                    text("UPDATE groups SET group_employees_count = group_employees_count + :n"),
                    {"n": extra},
                )
            session.commit()
        return fixed

    return fix


def _repair(platform: Platform) -> None:
    platform.router.enqueue(JobRequest("fix_counter_caches", None, {}))
    jobs = platform.broker.jobs
    with running_workers(platform):
        wait_until(
            lambda: (jobs.record(COUNTER_CACHE_FIX_JOB_ID) or {}).get("state") == "completed",
            timeout=30,
        )


def _parity(platform: Platform) -> tuple[int, str]:
    result = CliRunner().invoke(maintenance, ["parity"], obj=lambda: platform)
    return result.exit_code, result.output


def test_rails_repairing_the_native_definition_matches(
    shadowed: Platform, rails: RailsServer, drifted_group: int
) -> None:
    rails.on_counter_fix = _rails_repairs(shadowed)
    _repair(shadowed)
    code, output = _parity(shadowed)
    assert code == 0, output
    assert "match    " in output and "group_employees: native would fix 1, rails fixed 1" in output
    assert checks.shadow_parity(shadowed, checks.utcnow()).passed


def test_a_rails_counter_of_another_definition_diverges_and_fails_the_check(
    shadowed: Platform, rails: RailsServer, drifted_group: int
) -> None:
    rails.on_counter_fix = _rails_repairs(shadowed, extra=1)
    _repair(shadowed)
    code, output = _parity(shadowed)
    assert code == 1
    assert "DIVERGED" in output and "group_employees:" in output
    assert "out of parity after" in output
    check = checks.shadow_parity(shadowed, checks.utcnow())
    assert not check.passed and any("group_employees" in line for line in check.details)
    with session_scope(shadowed.sessions) as session:
        group = session.get(Group, drifted_group)
        assert group is not None and group.group_employees_count == 3  # only Rails wrote


def test_without_the_flag_nothing_is_measured(
    make_platform: MakePlatform, rails: RailsServer, drifted_group: int
) -> None:
    platform = make_platform(
        rails_internal_url=rails.base_url, rails_internal_token=RAILS_TOKEN, retries=FAST_RETRIES
    )
    _repair(platform)
    code, output = _parity(platform)
    assert code == 1 and ": 0, diverged: 0" in output
