"""Run a Python snippet in a fresh interpreter: what a process imports on its own (which
modules bootstrap leaves out until their first use) cannot be seen from inside the test
process, which has imported everything."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


def printed_by(script: str, env: Mapping[str, str] | None = None) -> list[str]:
    """The words ``script`` prints, run by a new interpreter from the repository root, with
    ``env`` added to this process's environment."""
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **(env or {})},
    ).stdout.split()
