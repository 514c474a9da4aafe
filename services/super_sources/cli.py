"""``speedtier super``: the six queues' status, a re-drive of one root's import, and the
sealing of connections' plain secrets."""

from __future__ import annotations

import click

from router.context import LoadContext
from services.connectors.nodes import NodeRef
from services.super_sources import store
from services.super_sources.connection_secrets import seal_plain
from services.super_sources.families import import_request
from services.super_sources.queue_status import counters, queue_status
from services.super_sources.sources import default_registry
from shared import audit
from shared.cli_types import RECORD_ID
from shared.credentials import CredentialBox, CredentialsKeyMissing
from shared.db.engine import session_scope


@click.group("super")
def super_group() -> None:
    """Super sources: queue status and import re-drive."""


@super_group.command("status")
@click.pass_obj
def status(load: LoadContext) -> None:
    """The six queues: ready and delayed messages; per organization, slots held (running or
    next in line) and jobs parked behind the group's cap."""
    platform = load()
    for row in queue_status(platform.brokers):
        click.echo(f"{row.queue:<22} ready={row.ready} delayed={row.delayed}")
        for owner, (admitted, parked) in row.groups.items():
            who = "all organizations" if owner == "*" else f"organization {owner}"
            click.echo(f"    {who}: running={admitted} parked={parked}")
    for name, value in sorted(counters(platform.broker).items()):
        click.echo(f"{name} {value}")


@super_group.command("import")
@click.argument("source")
@click.argument("connection_id", type=RECORD_ID)
@click.argument("root")
@click.option("--first-run", is_flag=True, help="Walk from the beginning, not incrementally.")
@click.pass_obj
def import_command(
    load: LoadContext, source: str, connection_id: int, root: str, first_run: bool
) -> None:
    """Re-drive the import of ROOT (``TYPE:ID``, or ``ID`` when SOURCE has one root type)
    of connection CONNECTION_ID."""
    registry = default_registry()
    entry = registry.get(source)
    if entry is None:
        known = ", ".join(sorted(registry.names()))
        raise click.ClickException(f"unknown source {source!r} (known: {known})")
    root_type, _, root_id = root.partition(":")
    if root_type not in entry.root_node_types:
        if len(entry.root_node_types) != 1:
            choices = ", ".join(entry.root_node_types)
            raise click.ClickException(f"ROOT must be TYPE:ID with TYPE one of {choices}")
        root_type, root_id = entry.root_node_types[0], root
    if not root_id:
        raise click.ClickException("ROOT has no id")
    platform = load()
    with session_scope(platform.sessions) as session:
        row = store.connection_for_webhook(session, source, connection_id, None)
        if row is None:
            raise click.ClickException(f"no {source} connection {connection_id}")
        organization_id = row.organization_id
    answer = platform.router.enqueue(
        import_request(
            organization_id, source, connection_id, NodeRef(root_type, root_id), first_run=first_run
        )
    )
    audit.record(platform.sessions, audit.cli_operator(), "redrive", answer.job_id, answer.outcome)
    click.echo(f"{answer.job_id}: {answer.outcome} on {answer.queue}")


@super_group.command("seal-credentials")
@click.pass_obj
def seal_credentials(load: LoadContext) -> None:
    """Seal every connection's plain credentials and webhook secret with
    SPEEDTIER_CONNECTOR_CREDENTIALS_KEY (rows a peer wrote plain; the migration sealed the
    rest)."""
    platform = load()
    key = platform.settings.connector_credentials_key
    box = CredentialBox.from_setting(key.get_secret_value() if key else None)
    with session_scope(platform.sessions) as session:
        try:
            sealed = seal_plain(store.plain_secret_connections(session), box)
        except CredentialsKeyMissing as exc:
            raise click.ClickException(str(exc)) from None
        session.commit()
    click.echo(f"sealed {sealed} connection(s)")


def register(main: click.Group) -> None:
    main.add_command(super_group)
