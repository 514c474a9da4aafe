"""``speedtier kb``: the knowledge sync's manual re-drive, and its validation checks
(:mod:`services.knowledge_sync.checks`) printed pass or fail."""

from __future__ import annotations

import sys

import click
from sqlalchemy.orm import Session

from router.context import LoadContext
from router.requests import JobRequest
from services.knowledge_sync.checks import run_checks
from services.knowledge_sync.families import PAUSE_FLAG, document_request, source_request
from shared import audit, progress
from shared.cli_types import RECORD_ID
from shared.db.engine import session_scope
from shared.db.models.rails import (
    KnowledgeBaseCrawlTask,
    KnowledgeBaseDocument,
    KnowledgeBaseSource,
)

_UnitModel = type[KnowledgeBaseSource] | type[KnowledgeBaseDocument] | type[KnowledgeBaseCrawlTask]
_UNIT_MODELS: dict[str, tuple[_UnitModel, str]] = {
    "sync_source": (KnowledgeBaseSource, "source_id"),
    "sync_document": (KnowledgeBaseDocument, "document_id"),
    "sync_document_chunks": (KnowledgeBaseDocument, "document_id"),
    "start_crawl": (KnowledgeBaseCrawlTask, "crawl_task_id"),
}


@click.group("kb")
def kb() -> None:
    """Knowledge Library sync: re-drive and check."""


@kb.command("tick")
@click.pass_obj
def tick(load: LoadContext) -> None:
    """Run the daily scan now (every source, plus the recovery sweep)."""
    platform = load()
    if platform.flags.is_enabled(PAUSE_FLAG):
        raise click.ClickException(f"{PAUSE_FLAG} is on: resume it first")
    with progress.working("kb tick: enqueueing every source and the recovery sweep"):
        summary = platform.tick("kb-sync").run("manual")
    audit.record(
        platform.sessions, audit.cli_operator(), "redrive", "kb tick", "done", str(summary)
    )
    click.echo(f"enqueued: {summary}")


@kb.command("enqueue")
@click.argument("kind", type=click.Choice(sorted(_UNIT_MODELS)))
@click.argument("record_id", type=RECORD_ID)
@click.pass_obj
def enqueue(load: LoadContext, kind: str, record_id: int) -> None:
    """Enqueue one unit for the record RECORD_ID (its organization is looked up)."""
    platform = load()
    model, field = _UNIT_MODELS[kind]
    with session_scope(platform.sessions) as session:
        row = session.get(model, record_id)
        if row is None:
            raise click.ClickException(f"no {model.__tablename__} row {record_id}")
        request = _request_for(session, kind, row, field)
    answer = platform.router.enqueue(request)
    click.echo(f"{answer.job_id}: {answer.outcome} on {answer.queue}")


def _request_for(session: Session, kind: str, row: object, field: str) -> JobRequest:
    """The request the normal path would send for ``row``: a source sync and a document
    sync carry their provider and organization data source (so the job runs on its
    provider's tier, under its provider's window), as the tick and the source run send them."""
    if isinstance(row, KnowledgeBaseSource):
        return source_request(
            row.organization_id, row.id, row.type, row.organization_data_source_id
        )
    if isinstance(row, KnowledgeBaseDocument):
        source = (
            session.get(KnowledgeBaseSource, row.knowledge_base_source_id)
            if row.knowledge_base_source_id is not None
            else None
        )
        if source is not None and source.organization_id != row.organization_id:
            source = None  # never route by another tenant's row
        return document_request(kind, row.organization_id, row.id, source)
    organization_id = int(getattr(row, "organization_id"))  # noqa: B009 - every unit has it
    return JobRequest(kind, organization_id, {field: int(getattr(row, "id"))})  # noqa: B009


@kb.command("check")
@click.pass_obj
def check(load: LoadContext) -> None:
    """Run the seed's validation queries and print pass or fail for each."""
    platform = load()
    with (
        progress.working("kb check: running the validation queries"),
        session_scope(platform.sessions) as session,
    ):
        checks = run_checks(session, platform.flags)
    for result in checks:
        click.echo(f"[{'pass' if result.passed else 'fail'}] {result.summary}")
        for line in result.details:
            click.echo(f"       {line}")
    sys.exit(0 if all(result.passed for result in checks) else 1)


def register(main: click.Group) -> None:
    """Add ``speedtier kb``; its commands get the process's context from the assembly's CLI
    (click's context object, a :data:`~router.context.LoadContext`)."""
    main.add_command(kb)
