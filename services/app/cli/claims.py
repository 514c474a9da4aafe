"""``speedtier claims list | mark-delivered KEY | release KEY``: the seed's "Resolving
uncertain delivery claims" over ``public.outbound_delivery_claims``.

A claim without ``delivered_at`` means one send's outcome could not be confirmed. Check
whether it landed (the monitoring Slack channel, the mail provider's log; the key encodes
channel, job id and enqueue time), then ``mark-delivered KEY`` (it landed: the next retry
skips it) or ``release KEY`` (it did not: re-drive the caller, whose retry claims and sends).
"""

from __future__ import annotations

import click

from router.context import LoadContext
from services.rails import delivery_claims
from shared import audit


@click.group("claims")
def claims() -> None:
    """Outbound delivery claims: list the unresolved ones, resolve one by hand."""


@claims.command("list")
@click.option("--limit", type=click.IntRange(1, 10_000), default=500, show_default=True)
@click.pass_obj
def list_claims(load: LoadContext, limit: int) -> None:
    """Claims with no delivered_at (uncertain or in flight), oldest first."""
    rows = delivery_claims.unresolved(load().sessions, limit=limit)
    for row in rows:
        click.echo(f"{row.created_at:%Y-%m-%dT%H:%M:%SZ}  {row.delivery_key}")
    click.echo(f"{len(rows)} unresolved claim(s)")


@claims.command("mark-delivered")
@click.argument("key")
@click.pass_obj
def mark_delivered(load: LoadContext, key: str) -> None:
    """The send of KEY landed: mark it delivered (OutboundDeliveryClaim#mark_delivered!)."""
    sessions = load().sessions
    marked = delivery_claims.mark_delivered(sessions, key)
    outcome = "marked" if marked else "not_unresolved"
    audit.record(sessions, audit.cli_operator(), "claim-delivered", key, outcome)
    if marked:
        click.echo(f"{key}: marked delivered")
        return
    existing = delivery_claims.find(sessions, key)
    if existing is None:
        raise click.ClickException(f"no claim {key!r}")
    click.echo(f"{key}: already delivered at {existing.delivered_at:%Y-%m-%dT%H:%M:%SZ}")


@claims.command("release")
@click.argument("key")
@click.pass_obj
def release(load: LoadContext, key: str) -> None:
    """The send of KEY did not land: drop the claim so the caller's retry sends again."""
    sessions = load().sessions
    released = delivery_claims.release(sessions, key)
    outcome = "released" if released else "not_unresolved"
    audit.record(sessions, audit.cli_operator(), "claim-release", key, outcome)
    if released:
        click.echo(f"{key}: released; re-drive its job to send again")
        return
    existing = delivery_claims.find(sessions, key)
    if existing is None:
        raise click.ClickException(f"no claim {key!r}")
    raise click.ClickException(f"{key} was delivered: a delivered claim is never released")


def register(main: click.Group) -> None:
    main.add_command(claims)
