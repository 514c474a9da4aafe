"""How the testkit spawns a Python child process (a scenario's worker, its window sampler):
from the repository root, with the root first on the child's path, so ``python -m testkit...``
finds this checkout's packages whatever the caller's working directory."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment with ``extra`` and the repository root first on the path."""
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return env
