"""The ``speedtier`` command. Each command group lives in its own module of this package."""

from __future__ import annotations

import importlib
from typing import Any

import click

from shared.redis_persistence import VolatileRedis

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


class _Main(click.Group):
    """Start-up refusals end a command with their message, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VolatileRedis as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """speedtier: speed-tier job platform next to Rails."""


def _register() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(main)


_register()
