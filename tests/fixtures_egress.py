"""The egress guard under test: the local fakes listen on loopback, so every test runs with
the process's guard allowing ``127.0.0.1/32`` and nothing else private (as an operator's
``SPEEDTIER_EGRESS_ALLOWED_NETWORKS=127.0.0.1/32`` would), restored after the test (a
platform's bootstrap sets its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.egress.addresses import address_guard, default_guard, set_default_guard

#: Where the test fakes listen: the one private network the tests' guard allows.
FAKES_NETWORK = "127.0.0.1/32"


@pytest.fixture(autouse=True)
def egress_allows_the_fakes() -> Iterator[None]:
    before = default_guard()
    set_default_guard(address_guard(False, [FAKES_NETWORK]))
    yield
    set_default_guard(before)
