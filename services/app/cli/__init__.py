"""The ``speedtier`` command. Each command group lives in its own module of this package."""

from __future__ import annotations

import importlib
from typing import Any

import click

from router.context import ServiceContext
from services.app.process_env import leave_pydantic_plugins_out

#: Every command (or group) of ``speedtier`` -> the module whose ``register(main)`` adds it.
#: A module is imported only when one of its commands runs (or ``--help`` lists them): a
#: worker process does not load the API server, the migrations or the scheduler, and neither
#: does each child of its pool, which imports this package again when it is spawned.
COMMANDS: dict[str, str] = {
    "db": "services.app.cli.db",
    "api": "services.app.cli.api",
    "ready": "services.app.cli.ready",
    "alive": "services.app.cli.alive",
    "worker": "services.app.cli.worker",
    "scheduler": "services.app.cli.scheduler",
    "ticks": "services.app.cli.scheduler",
    "tick": "services.app.cli.scheduler",
    "jobs": "services.app.cli.jobs",
    "status": "services.app.cli.jobs",
    "queues": "services.app.cli.jobs",
    "pause": "services.app.cli.flags",
    "resume": "services.app.cli.flags",
    "claims": "services.app.cli.claims",
    "up": "services.app.cli.up",
    # Products' command groups: their commands receive :func:`load_context` as click's
    # context object rather than bootstrapping themselves.
    "kb": "services.knowledge_sync.cli",
    "ingestion": "services.ingestion.cli",
    "maintenance": "services.maintenance.cli",
    "uploads": "services.uploads.cli",
    "super": "services.super_sources.cli",
    "reports": "services.reports.cli",
}


class _Main(click.Group):
    """Commands are loaded from :data:`COMMANDS` when asked for; start-up refusals end a
    command with their message, not a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is not None and cmd_name not in self.commands:
            importlib.import_module(module).register(self)
        return self.commands.get(cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            from services.app.cli.failures import one_line

            line = one_line(exc)
            if line is None:
                raise
            raise click.ClickException(line) from None


def load_context() -> ServiceContext:
    """The platform of a CLI command, built when the command runs."""
    from services.app.bootstrap import bootstrap

    return bootstrap(component="cli")


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    package_name="speedtier", prog_name="speedtier", message="%(prog)s %(version)s"
)
@click.pass_context
def main(ctx: click.Context) -> None:
    """speedtier: speed-tier job platform next to Rails."""
    from shared import runtime_file

    runtime_file.adopt_environment()  # beside a running `speedtier up`, run as it does
    leave_pydantic_plugins_out()  # as the program's entry point does (a command run in-process)
    ctx.obj = load_context
