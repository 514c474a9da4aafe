"""The ``speedtier`` command loads a command's module only when that command runs."""

from __future__ import annotations

import importlib
import os
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


#: A command added to ``speedtier`` in a fresh interpreter: it builds a pydantic model and
#: prints the variable and whether pydantic looked for plugins (its loader's cache is set
#: once it has).
PLUGINS_PROBE = (
    "import os\n"
    "import pydantic\n"
    "from pydantic.plugin import _loader\n"
    "from services.app.cli import main\n"
    "@main.command('probe')\n"
    "def probe():\n"
    "    class Probe(pydantic.BaseModel):\n"
    "        value: int\n"
    "    print(repr(os.environ.get('PYDANTIC_DISABLE_PLUGINS')), _loader._plugins is not None)\n"
    "main(['probe'], standalone_mode=False)\n"
)


def test_a_command_leaves_pydantics_plugin_search_out_unless_the_variable_is_set() -> None:
    unset = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}

    def run(env: dict[str, str]) -> list[str]:
        command = [sys.executable, "-c", PLUGINS_PROBE]
        result = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        return result.stdout.split()

    assert run(unset) == ["'__all__'", "False"]
    assert run({**unset, "PYDANTIC_DISABLE_PLUGINS": ""}) == ["''", "True"]
