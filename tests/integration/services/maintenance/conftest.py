"""The maintenance platform: the production services with Rails at the local Rails server
and short retries."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.app.bootstrap import Platform
from testkit.fakes.rails_server import RailsServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.maintenance.factories import FAST_RETRIES, RAILS_TOKEN


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token=RAILS_TOKEN)
    with server:
        yield server


@pytest.fixture
def platform(make_platform: MakePlatform, rails: RailsServer) -> Platform:
    return make_platform(
        rails_internal_url=rails.base_url,
        rails_internal_token=RAILS_TOKEN,
        rails_timeout_seconds=2.0,
        retries=FAST_RETRIES,
    )
