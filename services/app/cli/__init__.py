"""The ``speedtier`` command. Each command group lives in its own module of this package."""

from __future__ import annotations

import importlib
from typing import Any

import click

from router.context import ServiceContext
from shared.errors import NotConfigured
from shared.redis_persistence import VolatileRedis

_COMMAND_MODULES = (
    "services.app.cli.db",
    "services.app.cli.api",
    "services.app.cli.ready",
    "services.app.cli.alive",
    "services.app.cli.worker",
    "services.app.cli.scheduler",
    "services.app.cli.jobs",
    "services.app.cli.flags",
    "services.app.cli.claims",
    "services.app.cli.up",
)
#: Products' command groups, each module exposing ``register(main)``; their commands receive
#: :func:`load_context` as click's context object rather than bootstrapping themselves.
PRODUCT_COMMAND_MODULES = (
    "services.knowledge_sync.cli",
    "services.ingestion.cli",
    "services.maintenance.cli",
    "services.uploads.cli",
    "services.super_sources.cli",
    "services.reports.cli",
)


class _Main(click.Group):
    """Start-up refusals end a command with their message, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (VolatileRedis, NotConfigured) as exc:
            raise click.ClickException(str(exc)) from None


def load_context() -> ServiceContext:
    """The platform of a CLI command, built when the command runs."""
    from services.app.bootstrap import bootstrap

    return bootstrap(component="cli")


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def main(ctx: click.Context) -> None:
    """speedtier: speed-tier job platform next to Rails."""
    ctx.obj = load_context


def _register() -> None:
    for name in (*_COMMAND_MODULES, *PRODUCT_COMMAND_MODULES):
        importlib.import_module(name).register(main)


_register()
