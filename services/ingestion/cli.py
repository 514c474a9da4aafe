"""``speedtier ingestion``: the ingestion's usage events, summarized per organization; a
connector binding's sync; the connections' key rotation; a large tenant's own HNSW index."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from router.context import LoadContext
from services.ingestion import store
from services.ingestion.families import sync_request
from services.ingestion.tenant_index import (
    create_tenant_index,
    drop_tenant_index,
    index_name,
    tenant_indexes,
)
from shared.cli_types import RECORD_ID
from shared.credentials import CredentialBox
from shared.db.engine import session_scope
from shared.errors import RecordMissing


@click.group("ingestion")
def ingestion() -> None:
    """Knowledge-base ingestion (seed 003): usage, connector syncs."""


def _moment(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 date or time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@ingestion.command("usage")
@click.option("--organization", "organization_id", type=RECORD_ID, required=True)
@click.option("--since", help="From this date or time (ISO 8601; UTC when no zone).")
@click.option("--until", help="Before this date or time (ISO 8601; UTC when no zone).")
@click.pass_obj
def usage(load: LoadContext, organization_id: int, since: str | None, until: str | None) -> None:
    """Totals of an organization's usage events, per kind and knowledge base."""
    start, end = _moment(since), _moment(until)
    if start is not None and end is not None and end <= start:
        raise click.UsageError(f"--until ({until}) must be after --since ({since})")
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


@ingestion.command("sync-connector")
@click.option("--organization", "organization_id", type=RECORD_ID, required=True)
@click.argument("binding_id", type=RECORD_ID)
@click.option("--full", is_flag=True, help="List everything, not only what changed.")
@click.pass_obj
def sync_connector(load: LoadContext, organization_id: int, binding_id: int, full: bool) -> None:
    """Enqueue the sync of connector binding BINDING_ID (kb-connector-sync-<id>)."""
    platform = load()
    with session_scope(platform.sessions) as session:
        try:
            row = store.get_binding(session, organization_id=organization_id, binding_id=binding_id)
        except RecordMissing:
            raise click.ClickException(
                f"organization {organization_id} has no binding {binding_id}"
            ) from None
        request = sync_request(organization_id, row.id, row.connection_id, row.provider, full=full)
    answer = platform.router.enqueue(request)
    click.echo(f"{answer.job_id}: {answer.outcome} on {answer.queue}")


@ingestion.command("rotate-credentials-key")
@click.option(
    "--organization",
    "organization_id",
    type=RECORD_ID,
    help="Only this organization's connections (default: every organization's).",
)
@click.pass_obj
def rotate_credentials_key(load: LoadContext, organization_id: int | None) -> None:
    """Re-encrypt the stored connections' credentials under the first key of
    SPEEDTIER_CONNECTOR_CREDENTIALS_KEY (then the old keys can be dropped from it). Fails
    naming the connections no configured key opens (they keep their token)."""
    platform = load()
    key = platform.settings.connector_credentials_key
    box = CredentialBox.from_setting(key.get_secret_value() if key else None)
    if not box.configured:
        raise click.ClickException("SPEEDTIER_CONNECTOR_CREDENTIALS_KEY is not set")
    with session_scope(platform.sessions) as session:
        count, unreadable = store.rotate_all(session, box.rotate, organization_id=organization_id)
        session.commit()
    click.echo(f"{count} connection(s) re-encrypted under the first key")
    if unreadable:
        listed = ", ".join(str(ident) for ident in unreadable[:20])
        raise click.ClickException(
            f"{len(unreadable)} connection(s) open under no configured key: {listed}"
        )


@ingestion.command("tenant-index")
@click.option(
    "--organization",
    "organization_id",
    type=RECORD_ID,
    help="Build this organization's index (default: list the organizations that have one).",
)
@click.option("--drop", is_flag=True, help="Drop the organization's index instead.")
@click.pass_obj
def tenant_index(load: LoadContext, organization_id: int | None, drop: bool) -> None:
    """An organization's own HNSW index over its chunks, which search then walks instead of
    the shared one (for tenants above the exact-search threshold, 50,000 chunks); built
    CONCURRENTLY, so writes go on meanwhile."""
    if drop and organization_id is None:
        raise click.UsageError("--drop needs --organization (whose index to drop)")
    platform = load()
    with platform.sessions() as session:
        if organization_id is None:
            listed = tenant_indexes(session)
            click.echo(", ".join(map(str, listed)) or "no organization has an index of its own")
            return
        engine = session.get_bind().engine
    if drop:
        done = drop_tenant_index(engine, organization_id)
        click.echo(f"{index_name(organization_id)}: {'dropped' if done else 'none to drop'}")
        return
    try:
        done = create_tenant_index(engine, organization_id)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{index_name(organization_id)}: {'built' if done else 'exists already'}")


def register(main: click.Group) -> None:
    """Add ``speedtier ingestion``; its commands get the process's context from the
    assembly's CLI (click's context object, a :data:`~router.context.LoadContext`)."""
    main.add_command(ingestion)
