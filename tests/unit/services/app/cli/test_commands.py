"""The ``speedtier`` command loads a command's module only when that command runs."""

from __future__ import annotations

import importlib
import subprocess
import sys

import click
from click.testing import CliRunner

from services.app.cli import COMMANDS, main


def test_every_command_module_adds_exactly_the_commands_mapped_to_it() -> None:
    for module in sorted(set(COMMANDS.values())):
        group = click.Group()

        importlib.import_module(module).register(group)

        assert set(group.commands) == {name for name, owner in COMMANDS.items() if owner == module}


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])

    assert result.exit_code == 0, result.output
    listed = {line.split()[0] for line in result.output.split("Commands:")[1].splitlines() if line}
    assert listed == set(COMMANDS)


def test_a_worker_loads_no_other_command() -> None:
    # A fresh interpreter, as a spawned child of the worker pool is.
    script = (
        "import sys\n"
        "from services.app.cli import main\n"
        "try:\n"
        "    main(['worker', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )

    loaded = set(
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, check=True
        ).stdout.split()
    )

    assert "services.app.cli.worker" in loaded
    others = {module for name, module in COMMANDS.items() if name != "worker"}
    assert not others & loaded
    assert not {"alembic", "gunicorn", "apscheduler", "rich", "flask"} & loaded
