"""``speedtier uploads``: the conversation-upload validation checks
(:mod:`services.uploads.checks`) printed pass or fail with the rows behind each, and the
manual resolution of an uncertain XCALLY completion (:mod:`services.uploads.resolution`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from router.context import LoadContext
from services.uploads import checks as checks_module
from services.uploads import cutover, resolution, shadow
from services.uploads.checks import run_checks
from services.uploads.families import completion_job_id
from services.uploads.ticks import TICK_NAME, last_due_slot
from services.uploads.verdicts import Check
from shared import audit, progress
from shared.cli_types import RECORD_ID
from shared.errors import QueueUnavailable
from shared.rollouts import (
    CONVERSATION_UPLOAD_DURABLE_DELIVERY,
    CONVERSATION_UPLOAD_SYNC_COMPLETION,
)

#: Without ``--deployed-at`` every direct upload ever expired counts (the strictest reading).
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@click.group("uploads")
def uploads() -> None:
    """Conversation uploads: validation checks, the runbook's readiness and canary gates,
    resolving an uncertain completion."""


@uploads.command("check")
@click.option(
    "--deployed-at",
    type=click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]),
    default=None,
    help="UTC time the fix was deployed ('<deploy timestamp>' of the seed's second query);"
    " without it every expired direct upload counts.",
)
@click.pass_obj
def check(load: LoadContext, deployed_at: datetime | None) -> None:
    """Run the seed's five validation queries and the zero-new-GoodJob query (read-only)."""
    platform = load()
    since = _EPOCH if deployed_at is None else deployed_at.replace(tzinfo=UTC)
    with (
        progress.working("uploads check: running the validation queries"),
        platform.sessions() as session,
    ):
        try:
            checks = run_checks(
                session, deployed_at=since, completion_enabled=_completion_flag(platform)
            )
        finally:
            session.rollback()
    _report(checks)


def _completion_flag(platform: Any) -> Callable[[int], bool]:
    def enabled(organization_id: int) -> bool:
        return bool(
            platform.flags.rollout(
                CONVERSATION_UPLOAD_SYNC_COMPLETION, organization_id=organization_id
            )
        )

    return enabled


def _report(checks: list[Check]) -> None:
    for result in checks:
        click.echo(f"[{'pass' if result.passed else 'fail'}] {result.summary}")
        for line in result.details:
            click.echo(f"       {line}")
    sys.exit(0 if all(result.passed for result in checks) else 1)


@uploads.command("readiness")
@click.pass_obj
def readiness(load: LoadContext) -> None:
    """The runbook's step 1 (server first, flags off): prints the id of the scan's last due
    tick (conversation-upload-checks-tick-<YYYY-MM-DDTHH:MMZ>) and checks that it completed
    with its skippedDirect/ledger counts, that the first validation query holds no pending
    direct upload older than 45 minutes, and that the ledger table is empty."""
    platform = load()
    now = datetime.now(UTC)
    tick = platform.tick(TICK_NAME)
    job_id = tick.job_id(tick.slot(last_due_slot(now)))
    click.echo(f"scan tick job: {job_id}  (speedtier jobs show {job_id})")
    record = platform.brokers.record(job_id)
    with platform.sessions() as session:
        try:
            checks = [
                checks_module.pending_direct_with_file(session, now),
                *cutover.readiness(session, job_id, record),
            ]
        finally:
            session.rollback()
    _report(checks)


@uploads.command("canary")
@click.argument("organization_id", type=RECORD_ID)
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]),
    default=None,
    help="UTC time the durable-delivery flag was enabled for the organization (default: 24"
    " hours ago); the gates fail until 24 hours have passed since it.",
)
@click.pass_obj
def canary(load: LoadContext, organization_id: int, since: datetime | None) -> None:
    """The runbook's step 2 gates for ORGANIZATION_ID (read-only): every new ledger row
    completed, none failed, no stale uncertain row, no unsynced completion, no duplicate
    idempotency key, no CompleteConversationSyncJob row of the organization."""
    platform = load()
    now = datetime.now(UTC)
    start = now - cutover.CANARY_WINDOW if since is None else since.replace(tzinfo=UTC)
    flags = [
        Check(
            bool(platform.flags.rollout(flag, organization_id=organization_id)),
            f"{flag} on for organization {organization_id}",
        )
        for flag in (CONVERSATION_UPLOAD_SYNC_COMPLETION, CONVERSATION_UPLOAD_DURABLE_DELIVERY)
    ]
    with platform.sessions() as session:
        try:
            gates = cutover.canary_gates(session, organization_id, start, now)
        finally:
            session.rollback()
    runs = shadow.shadow_runs(_upload_jobs(platform), start, organization_id)
    diverged = [run for run in runs if not run.matched]
    parity = Check(
        not diverged,
        f"native processing shadow runs of the organization: {len(runs)},"
        f" diverged: {len(diverged)}",
        tuple(_describe_run(run) for run in diverged),
    )
    _report([*flags, *gates, parity])


def _upload_jobs(platform: Any) -> Any:
    """The job store the upload families (and their shadow runs) live in."""
    return platform.brokers.of_tier("maintenance").jobs


def _describe_run(run: shadow.ShadowRun) -> str:
    r = run.record
    return f"upload {r['conversation_upload_id']} {r['ran_at']}: {'; '.join(r['differences'])}"


@uploads.command("parity")
@click.option(
    "--since",
    type=click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"]),
    default=None,
    help="Start of the bake window (UTC; default: 24 hours ago).",
)
@click.option("--org", "organization_id", type=RECORD_ID, default=None)
@click.pass_obj
def parity(load: LoadContext, since: datetime | None, organization_id: int | None) -> None:
    """Shadow runs of native upload processing beside Rails' (flag
    api2_conversation_upload_native_processing_shadow): each upload read again by the native
    rules and what differed. Exits 1 while the window holds a divergence, or no run."""
    platform = load()
    start = since.replace(tzinfo=UTC) if since else datetime.now(UTC) - shadow.SHADOW_WINDOW
    runs = shadow.shadow_runs(_upload_jobs(platform), start, organization_id)
    for run in runs:
        verdict = "match   " if run.matched else "DIVERGED"
        click.echo(f"{verdict} org {run.record['organization_id']} {_describe_run(run)}")
    diverged = sum(1 for run in runs if not run.matched)
    click.echo(f"shadow runs since {start:%FT%TZ}: {len(runs)}, diverged: {diverged}")
    sys.exit(0 if runs and not diverged else 1)


@uploads.command("resolve-completion")
@click.argument("upload_id", type=RECORD_ID)
@click.option(
    "--mark-delivered",
    is_flag=True,
    help="complete_conversation_sync landed (checked in Rails): mark its claim delivered.",
)
@click.option(
    "--release",
    is_flag=True,
    help="It did not land: release the claim and re-add the pinned completion job.",
)
@click.pass_obj
def resolve_completion(
    load: LoadContext, upload_id: int, mark_delivered: bool, release: bool
) -> None:
    """Resolve UPLOAD_ID's uncertain XCALLY completion: check the pinned job
    provider_conversation_sync_completion_xcally-upload-UPLOAD_ID and the claim and ledger
    rows, then mark delivered or release and re-drive, as the evidence (or the option) says.
    Prints what it found and did; refuses (exit 1) when the state does not allow it."""
    if mark_delivered and release:
        raise click.UsageError("--mark-delivered and --release exclude each other")
    choice = (
        resolution.MARK_DELIVERED if mark_delivered else resolution.RELEASE if release else None
    )
    platform = load()
    with platform.sessions() as session:
        organization_id = resolution.upload_organization(session, upload_id)
    if organization_id is None:
        raise click.ClickException(f"no conversation upload {upload_id}")
    job_id = completion_job_id(upload_id)
    job_state = (platform.brokers.record(job_id) or {}).get("state")
    found = resolution.inspect(platform.sessions, organization_id, upload_id, job_state)
    for line in resolution.describe(found):
        click.echo(line)
    enabled = platform.flags.rollout(
        CONVERSATION_UPLOAD_SYNC_COMPLETION, organization_id=organization_id
    )
    try:
        steps = resolution.plan(found, choice, enabled)
    except resolution.Refused as exc:
        raise click.ClickException(str(exc)) from None
    try:
        done = resolution.apply(platform.sessions, platform.router, found, steps)
    except QueueUnavailable as exc:
        raise click.ClickException(
            f"Redis did not take {job_id} ({exc}): the claim is resolved; run"
            f" 'speedtier uploads resolve-completion {upload_id} --release' again once Redis"
            " answers (a ledger row, now accepted, is also replayed by the reconciler)"
        ) from None
    audit.record(
        platform.sessions,
        audit.cli_operator(),
        "resolve-completion",
        f"upload {upload_id}",
        "done",
        "; ".join(done),
    )
    for line in done:
        click.echo(f"did: {line}")


def register(main: click.Group) -> None:
    """Add ``speedtier uploads`` (its commands get the process's context from the CLI)."""
    main.add_command(uploads)
