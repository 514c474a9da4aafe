"""The test suite: ``unit/`` (no I/O), ``integration/`` (real Redis and PostgreSQL) and
``e2e/`` (processes), the first two mirroring the production tree (docs/guides/testing.md)."""

from pathlib import Path

#: The repository's root (test modules sit at different depths below it).
REPO = Path(__file__).resolve().parent.parent
