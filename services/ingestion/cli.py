"""``speedtier ingestion``: the ingestion's usage events, summarized per organization."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from router.context import LoadContext
from services.ingestion import store
from shared.db.engine import session_scope


@click.group("ingestion")
def ingestion() -> None:
    """Knowledge-base ingestion (seed 003): usage."""


def _moment(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 date or time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@ingestion.command("usage")
@click.option("--organization", "organization_id", type=click.IntRange(min=1), required=True)
@click.option("--since", help="From this date or time (ISO 8601; UTC when no zone).")
@click.option("--until", help="Before this date or time (ISO 8601; UTC when no zone).")
@click.pass_obj
def usage(load: LoadContext, organization_id: int, since: str | None, until: str | None) -> None:
    """Totals of an organization's usage events, per kind and knowledge base."""
    start, end = _moment(since), _moment(until)
    platform = load()
    with session_scope(platform.sessions) as session:
        totals = store.usage_summary(
            session, organization_id=organization_id, since=start, until=end
        )
    window = f"{start.isoformat() if start else 'the start'} to {end.isoformat() if end else 'now'}"
    click.echo(f"organization {organization_id}, {window}:")
    if not totals:
        click.echo("  no usage events")
        return
    click.echo(
        f"  {'kind':<24} {'base':>8} {'events':>8} {'docs':>6} {'chunks':>8} "
        f"{'tokens':>10} {'embedded':>9} {'unchanged':>9}"
    )
    for row in totals:
        base = str(row.knowledge_base_id) if row.knowledge_base_id is not None else "-"
        click.echo(
            f"  {row.kind:<24} {base:>8} {row.events:>8} {row.documents:>6} {row.chunks:>8} "
            f"{row.tokens:>10} {row.embedded:>9} {row.unchanged:>9}"
        )


def register(main: click.Group) -> None:
    """Add ``speedtier ingestion``; its commands get the process's context from the
    assembly's CLI (click's context object, a :data:`~router.context.LoadContext`)."""
    main.add_command(ingestion)
