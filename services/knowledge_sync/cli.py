"""``speedtier kb``: the knowledge sync's manual re-drive, and its validation checks
(:mod:`services.knowledge_sync.checks`) printed pass or fail."""

from __future__ import annotations

import sys

import click

from router.context import LoadContext
from router.requests import JobRequest
from services.knowledge_sync.checks import run_checks
from services.knowledge_sync.families import PAUSE_FLAG
from shared import progress
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
    click.echo(f"enqueued: {summary}")


@kb.command("enqueue")
@click.argument("kind", type=click.Choice(sorted(_UNIT_MODELS)))
@click.argument("record_id", type=click.IntRange(min=1))
@click.pass_obj
def enqueue(load: LoadContext, kind: str, record_id: int) -> None:
    """Enqueue one unit for the record RECORD_ID (its organization is looked up)."""
    platform = load()
    model, field = _UNIT_MODELS[kind]
    with session_scope(platform.sessions) as session:
        row = session.get(model, record_id)
        if row is None:
            raise click.ClickException(f"no {model.__tablename__} row {record_id}")
        params: dict[str, object] = {field: record_id}
        if isinstance(row, KnowledgeBaseSource):
            params.update(
                provider=row.type, organization_data_source_id=row.organization_data_source_id
            )
        organization_id = int(getattr(row, "organization_id"))  # noqa: B009 - every unit model has it
    answer = platform.router.enqueue(JobRequest(kind, organization_id, params))
    click.echo(f"{answer.job_id}: {answer.outcome} on {answer.queue}")


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
