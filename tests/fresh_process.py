"""Run a Python snippet in a fresh interpreter: what a process imports on its own (which
modules bootstrap leaves out until their first use) cannot be seen from inside the test
process, which has imported everything."""

from __future__ import annotations

import subprocess
import sys


def printed_by(script: str) -> list[str]:
    """The words ``script`` prints, run by a new interpreter from the repository root."""
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
