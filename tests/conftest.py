"""Shared pytest fixtures: one plugin module per piece of real infrastructure, and the
platform built on them (``make_platform``, ``platform``)."""

pytest_plugins = [
    "tests.fixtures_redis",
    "tests.fixtures_db",
    "tests.fixtures_pgvector",
    "tests.fixtures_platform",
]
