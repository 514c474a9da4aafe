"""Shared pytest fixtures: one plugin module per piece of real infrastructure."""

pytest_plugins = ["tests.fixtures_redis", "tests.fixtures_db", "tests.fixtures_pgvector"]
