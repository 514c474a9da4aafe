"""Shared pytest fixtures: one plugin module per piece of real infrastructure, and the
platform built on them (``make_platform``, ``platform``).

Hypothesis runs without its timing checks (the 200 ms deadline per example, the slow-data
health check): under pytest-xdist on a shared 2-core machine they measure the machine, not
the code; what a property test asserts is unchanged.
"""

import os

from hypothesis import HealthCheck, settings

# An unset SPEEDTIER_ENV means production (a strong token and the credentials key required):
# the suite, and every process it starts, runs as test unless a test says otherwise.
os.environ.setdefault("SPEEDTIER_ENV", "test")

settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

pytest_plugins = [
    "tests.fixtures_redis",
    "tests.fixtures_db",
    "tests.fixtures_pgvector",
    "tests.fixtures_platform",
    "tests.fixtures_egress",
]
