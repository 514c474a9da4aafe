"""Knowledge sync's fixtures: Rails rows removed after each test (``kb``), and a platform
with knowledge sync's settings and no provider (modules with local provider servers
override ``platform``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session, sessionmaker

from services.app.bootstrap import Platform
from tests.fixtures_platform import MakePlatform
from tests.integration.services.knowledge_sync.factories import Kb, knowledge_sync_settings


@pytest.fixture
def kb(db_session_factory: sessionmaker[Session]) -> Iterator[Kb]:
    kb = Kb(db_session_factory)
    yield kb
    kb.cleanup()


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(**knowledge_sync_settings())
