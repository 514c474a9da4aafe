"""The reports' platform: Rails and Slack are the local protocol servers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.app.bootstrap import Platform
from services.reports.families import FAMILY
from testkit.fakes.rails_server import RailsServer
from testkit.fakes.slack_server import SlackServer
from tests.fixtures_platform import MakePlatform
from tiers.policies import RetryPolicy

SHORT_RETRY = RetryPolicy(max_attempts=3, base_seconds=0.2)


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer()
    with server:
        yield server


@pytest.fixture
def slack() -> Iterator[SlackServer]:
    server = SlackServer()
    with server:
        yield server


#: The HTTP timeout of a test whose fake answers late on purpose: the fake's delay is longer.
IMPATIENT = 1.0
#: Every other test's HTTP timeout: a loaded machine can take over a second to answer a post,
#: and a timed-out post is an uncertain delivery the job does not retry by itself.
PATIENT = 10.0


def reports_settings(
    rails: RailsServer, slack: SlackServer, timeout: float = PATIENT
) -> dict[str, object]:
    return {
        "rails_internal_url": rails.base_url,
        "rails_internal_token": rails.token,
        "rails_timeout_seconds": timeout,
        "slack_bot_token": slack.token,
        "slack_api_url": f"{slack.base_url}/api/",
        "reports_slack_channel": "C0REPORTS",
        "http_timeout_seconds": timeout,
    }


@pytest.fixture
def platform(make_platform: MakePlatform, rails: RailsServer, slack: SlackServer) -> Platform:
    return make_platform(retries={FAMILY: SHORT_RETRY}, **reports_settings(rails, slack))


@pytest.fixture
def impatient_platform(
    make_platform: MakePlatform, rails: RailsServer, slack: SlackServer
) -> Platform:
    """The reports' platform with :data:`IMPATIENT` HTTP timeouts, for slow-answer tests."""
    return make_platform(
        retries={FAMILY: SHORT_RETRY}, **reports_settings(rails, slack, timeout=IMPATIENT)
    )
