"""``speedtier pause NAME`` / ``speedtier resume NAME``: the kill switches, in Flipper's
tables, shared with Rails. Each is audited as the dashboard's are (``shared.audit``), by
``cli:<user>``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from shared import audit

if TYPE_CHECKING:
    from services.app.bootstrap import Platform


def _known_flags() -> tuple[Platform, set[str]]:
    from services.app.bootstrap import bootstrap

    platform = bootstrap(component="cli")
    return platform, {f.pause_flag for f in platform.registry if f.pause_flag}


def _set(name: str, enabled: bool, force: bool) -> None:
    if not name.strip() or "\x00" in name:
        raise click.UsageError(f"{name!r} is not a flag name")
    platform, known = _known_flags()
    if name not in known and not force:
        listing = ", ".join(sorted(known)) or "none"
        raise click.UsageError(
            f"no family is paused by {name!r} (known: {listing}); --force sets it"
        )
    platform.flags.set(name, enabled)
    outcome = "paused" if enabled else "resumed"
    audit.record(
        platform.sessions, audit.cli_operator(), "pause" if enabled else "resume", name, outcome
    )
    overridden = platform.flags.overrides.get(name)
    click.echo(f"{name}: {'paused' if enabled else 'resumed'}")
    if overridden is not None and overridden != enabled:
        click.echo(f"warning: SPEEDTIER_FLAGS forces {name}={overridden} in this environment")


@click.command("pause")
@click.argument("name")
@click.option("--force", is_flag=True, help="Set a flag no registered family names.")
def pause(name: str, force: bool) -> None:
    """Raise kill switch NAME: queued jobs of its families complete as skipped."""
    _set(name, True, force)


@click.command("resume")
@click.argument("name")
@click.option("--force", is_flag=True, help="Clear a flag no registered family names.")
def resume(name: str, force: bool) -> None:
    """Lower kill switch NAME. Skipped jobs are not re-run: re-drive with `speedtier tick`."""
    _set(name, False, force)


def register(main: click.Group) -> None:
    main.add_command(pause)
    main.add_command(resume)
