"""The ``speedtier`` command. Each command group lives in its own module of this package."""

from __future__ import annotations

import importlib

import click

_COMMAND_MODULES = (
    "services.cli.db",
    "services.cli.api",
    "services.cli.health",
    "services.cli.worker",
    "services.cli.scheduler",
    "services.cli.jobs",
    "services.cli.flags",
    "services.cli.up",
    "services.knowledge_sync.cli",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """speedtier: speed-tier job platform next to Rails."""


def _register() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(main)


_register()
