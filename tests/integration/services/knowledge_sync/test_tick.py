"""The ``kb-sync`` tick: its fan-out over sources and the recovery sweep, failure isolation,
the kill switch (CLI refusals and queued jobs skipped at execution), and ``speedtier kb
check``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner
from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Enqueued
from router.requests import JobRequest
from services.app.bootstrap import Platform
from services.app.cli import main
from services.knowledge_sync.families import PAUSE_FLAG
from shared.db.models import KnowledgeBaseSource
from shared.errors import QueueUnavailable
from tests.integration.services.knowledge_sync.factories import (
    Kb,
    job_states,
    queued_messages,
    running_workers,
    settle,
    state,
    utc,
    wipe_knowledge_tables,
)

SLOT = "2026-11-30T01:00Z"


@pytest.fixture(autouse=True)
def empty_knowledge_tables(db_session_factory: sessionmaker[Session]) -> None:
    """The tick scans every tenant of the database: start from empty knowledge tables."""
    wipe_knowledge_tables(db_session_factory)


@pytest.fixture
def platform(platform: Platform) -> Iterator[Platform]:
    """Knowledge sync's platform, its kill switch lowered afterwards (flags are rows in the
    shared test database)."""
    yield platform
    platform.flags.set(PAUSE_FLAG, False)


@pytest.fixture
def cli_env(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, database_url: str, namespace: str
) -> CliRunner:
    """``speedtier`` commands bootstrap from the environment: point it at this test."""
    for name, value in {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
        "SPEEDTIER_FLAG_CACHE_SECONDS": "0",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SPEEDTIER_FLAGS", raising=False)
    return CliRunner()


def tick(platform: Platform) -> dict[str, int]:
    return dict(platform.tick("kb-sync").run(SLOT))


def queued_job_ids(platform: Platform, *queues: str) -> list[str]:
    return sorted(m["options"]["st_job"] for q in queues for m in queued_messages(platform, q))


# -- fan-out --------------------------------------------------------------------------------


def test_the_tick_enqueues_every_live_source_but_intercom_and_the_sweep_backlog(
    platform: Platform, kb: Kb
) -> None:
    a, b = kb.organization("A"), kb.organization("B")
    ods = kb.data_source(a, "notion", {"api_token": "t"})
    notion = kb.source(a, "notion", ods=ods)
    zendesk = kb.source(a, "zendesk")
    confluence = kb.source(b, "confluence")
    url = kb.source(b, "url", settings={"url": "https://docs.test/"})
    kb.source(a, "intercom")
    kb.source(b, "notion", discarded=True)
    backlog = kb.document(b, None, content="Needs chunks.")
    kb.document(a, notion, content="Chunked.", chunks_synced_at=utc())
    kb.document(a, notion, source_type="intercom", identifier="i", content="Intercom's own.")

    summary = tick(platform)

    assert summary == {"added": 5, "replaced": 0, "deduplicated": 0, "failed": 0}
    assert queued_job_ids(platform, "kb_source_sync.slow") == sorted(
        [f"kb-source-sync-{notion}", f"kb-source-sync-{url}"]
    )
    assert queued_job_ids(platform, "kb_source_sync.fast") == sorted(
        [f"kb-source-sync-{zendesk}", f"kb-source-sync-{confluence}"]
    )
    assert queued_job_ids(platform, "kb_document_chunks.fast") == [f"kb-document-chunks-{backlog}"]
    (notion_message,) = [
        m
        for m in queued_messages(platform, "kb_source_sync.slow")
        if m["kwargs"]["source_id"] == notion
    ]
    assert notion_message["kwargs"]["organization_id"] == a
    assert notion_message["options"]["st_scope"] == f"ods-{ods}"

    # A second emission while they wait changes nothing.
    assert tick(platform) == {"added": 0, "replaced": 0, "deduplicated": 5, "failed": 0}


def test_one_request_that_cannot_be_enqueued_does_not_stop_the_others(
    platform: Platform, kb: Kb
) -> None:
    org = kb.organization()
    good = [kb.source(org, "zendesk", name=f"Help {n}") for n in range(3)]
    invalid = kb.source(org, "x" * 80)  # a type too long to route: refused by validation
    outage = kb.source(org, "confluence")  # Redis refuses this one (injected below)
    backlog = kb.document(org, None, content="Needs chunks.")

    original = platform.router.enqueue_many

    def flaky(requests: Sequence[JobRequest]) -> list[Enqueued]:
        if any(r.params.get("source_id") == outage for r in requests):
            raise QueueUnavailable("injected: Redis refused the batch")
        return original(requests)

    platform.router.enqueue_many = flaky  # type: ignore[method-assign]
    try:
        summary = tick(platform)
    finally:
        platform.router.enqueue_many = original  # type: ignore[method-assign]

    assert summary == {"added": 4, "replaced": 0, "deduplicated": 0, "failed": 2}
    assert sorted(job_states(platform)) == sorted(
        [*(f"kb-source-sync-{s}" for s in good), f"kb-document-chunks-{backlog}"]
    )
    assert state(platform, f"kb-source-sync-{invalid}") is None
    assert state(platform, f"kb-source-sync-{outage}") is None


# -- the kill switch ------------------------------------------------------------------------


def test_the_cli_refuses_to_run_the_tick_while_paused_and_runs_it_once_resumed(
    platform: Platform, kb: Kb, cli_env: CliRunner
) -> None:
    org = kb.organization()
    source = kb.source(org, "zendesk")
    platform.flags.set(PAUSE_FLAG, True)

    for command in (["tick", "kb-sync"], ["kb", "tick"]):
        result = cli_env.invoke(main, command)
        assert result.exit_code == 1, (command, result.output)
        assert PAUSE_FLAG in result.output, command
    assert job_states(platform) == {}

    platform.flags.set(PAUSE_FLAG, False)
    result = cli_env.invoke(main, ["kb", "tick"])
    assert result.exit_code == 0, result.output
    assert "'added': 1" in result.output
    assert state(platform, f"kb-source-sync-{source}") == "waiting"


def test_queued_jobs_complete_as_skipped_when_the_flag_is_raised_before_they_run(
    platform: Platform, kb: Kb
) -> None:
    org = kb.organization()
    source = kb.source(org, "zendesk")
    url_source = kb.source(org, "url", settings={"url": "https://docs.test/"})
    task = kb.crawl_task(org, url_source, "https://docs.test/")
    document = kb.document(org, None, content="Needs chunks.")
    before = kb.snapshot(org)
    answers = platform.router.enqueue_many(
        [
            JobRequest("sync_source", org, {"source_id": source, "provider": "zendesk"}),
            JobRequest("sync_document", org, {"document_id": document}),
            JobRequest("sync_document_chunks", org, {"document_id": document}),
            JobRequest("start_crawl", org, {"crawl_task_id": task}),
            JobRequest(
                "crawl_url", org, {"crawl_task_id": task, "url": "https://docs.test/", "depth": 0}
            ),
            JobRequest("tick:kb-sync", None, {"slot": SLOT}),
        ]
    )

    platform.flags.set(PAUSE_FLAG, True)
    with running_workers(platform):
        settle(platform)

    assert {a.job_id: state(platform, a.job_id) for a in answers} == {
        a.job_id: "skipped" for a in answers
    }
    assert kb.snapshot(org) == before
    assert kb.get(KnowledgeBaseSource, source).sync_status == "pending"


# -- speedtier kb check ---------------------------------------------------------------------


def test_kb_check_passes_on_a_clean_state_and_fails_on_backlog_and_failing_sources(
    platform: Platform, kb: Kb, cli_env: CliRunner
) -> None:
    org = kb.organization()
    kb.source(org, "zendesk", sync_status="synced", last_synced_at=utc(3600))
    kb.source(org, "intercom", sync_status="failed")  # never the pipeline's concern
    kb.document(org, None, content="Chunked.", chunks_synced_at=utc())

    clean = cli_env.invoke(main, ["kb", "check"])

    assert clean.exit_code == 0, clean.output
    lines = clean.output.splitlines()
    assert lines[0] == "[pass] recovery-sweep backlog (content but no chunks): 0"
    assert lines[1] == "[pass] sources still failing after the daily scan: 0"
    assert lines[2] == f"[pass] {PAUSE_FLAG} is off (expected off)"

    failed = kb.source(org, "notion", sync_status="failed", last_synced_at=utc(600))
    stale = kb.source(org, "confluence", sync_status="synced", last_synced_at=utc(3 * 86_400))
    kb.document(org, None, identifier="x", content="Not chunked yet.")
    kb.document(org, None, identifier="y", content="Nor this one.")

    dirty = cli_env.invoke(main, ["kb", "check"])

    assert dirty.exit_code == 1, dirty.output
    lines = dirty.output.splitlines()
    assert lines[0] == "[fail] recovery-sweep backlog (content but no chunks): 2"
    assert lines[1] == "[fail] sources still failing after the daily scan: 2"
    listed = "\n".join(lines[2:4])
    assert f"source {failed} org {org} notion failed" in listed
    assert f"source {stale} org {org} confluence synced" in listed
    assert lines[4] == f"[pass] {PAUSE_FLAG} is off (expected off)"

    platform.flags.set(PAUSE_FLAG, True)
    paused = cli_env.invoke(main, ["kb", "check"])
    assert paused.exit_code == 1
    assert f"[fail] {PAUSE_FLAG} is on (expected off)" in paused.output


def test_kb_check_runs_the_seeds_good_job_queries(
    platform: Platform, db_session_factory: sessionmaker[Session], cli_env: CliRunner
) -> None:
    import uuid

    from shared.db.models import GoodJob, GoodJobExecution

    def good_job(job_class: str, hours_ago: float, **fields: object) -> GoodJob:
        created = datetime.now(UTC) - timedelta(hours=hours_ago)
        return GoodJob(
            job_class=job_class, active_job_id=uuid.uuid4(), created_at=created, **fields
        )

    rows = [
        good_job("SyncKnowledgeBaseDocumentJob", 13),  # outside GoodJob's 12-hour window
        good_job("CompleteConversationSyncJob", 1),  # another pipeline's class
    ]
    with db_session_factory() as session:
        session.add_all(rows)
        session.commit()
    try:
        clean = cli_env.invoke(main, ["kb", "check"])
        assert "[pass] new GoodJob rows of the knowledge base classes in 12 hours: 0" in (
            clean.output
        )
        assert "[pass] GoodJob throttle failures in 12 hours: 0 (expected 0)" in clean.output

        # A job throttled twice and then completed: its good_jobs row keeps no error, only
        # its executions show the throttle (the storm the seed's query counts).
        throttled = good_job("SyncKnowledgeBaseDocumentJob", 1, executions_count=3)
        fresh = [
            throttled,
            good_job("SyncKnowledgeBaseDocumentJob", 2, executions_count=1),
            GoodJob(job_class="CrawlKnowledgeBaseUrlJob", created_at=datetime.now(UTC)),
        ]
        executions = [
            GoodJobExecution(
                active_job_id=throttled.active_job_id,
                job_class=throttled.job_class,
                error=error,
                created_at=datetime.now(UTC) - timedelta(minutes=30 - n),
            )
            for n, error in enumerate(["GoodJob::ThrottleExceededError: throttled", None, None])
        ]
        rows += fresh
        with db_session_factory() as session:
            session.add_all(fresh)
            session.add_all(executions)
            session.commit()
        rows += executions
        dirty = cli_env.invoke(main, ["kb", "check"])
        assert dirty.exit_code == 1
        out = dirty.output
        assert "[fail] new GoodJob rows of the knowledge base classes in 12 hours: 3" in out
        assert "SyncKnowledgeBaseDocumentJob: 2 jobs" in out
        assert "SyncKnowledgeBaseDocumentJob: 3 executions of 1 jobs, 1 throttle failures" in out
        assert "[fail] GoodJob throttle failures in 12 hours: 1 (expected 0)" in out

        platform.flags.set(PAUSE_FLAG, True)  # the fallback enqueues GoodJob on purpose
        paused = cli_env.invoke(main, ["kb", "check"])
        assert "[pass] new GoodJob rows of the knowledge base classes in 12 hours: 3" in (
            paused.output
        )
    finally:
        with db_session_factory() as session:
            for row in rows:
                session.delete(session.merge(row))
            session.commit()


# -- manual re-drive ------------------------------------------------------------------------


def test_kb_enqueue_routes_a_document_by_its_sources_provider(
    platform: Platform, kb: Kb, cli_env: CliRunner
) -> None:
    # Given a Notion document and a Zendesk one, each under a source with a data source
    org = kb.organization()
    notion_ods = kb.data_source(org, "notion", {"api_token": "secret"})
    zendesk_ods = kb.data_source(org, "zendesk", {"api_token": "t"})
    notion_doc = kb.document(org, kb.source(org, "notion", ods=notion_ods), identifier="n")
    zendesk_doc = kb.document(
        org, kb.source(org, "zendesk", ods=zendesk_ods), source_type="zendesk", identifier="z"
    )

    for document in (notion_doc, zendesk_doc):
        result = cli_env.invoke(main, ["kb", "enqueue", "sync_document", str(document)])
        assert result.exit_code == 0, result.output

    # Then each runs on its provider's tier and carries its provider and window scope
    (notion,) = queued_messages(platform, "kb_document_sync.slow")
    (zendesk,) = queued_messages(platform, "kb_document_sync.fast")
    assert notion["options"]["st_provider"] == "notion"
    assert notion["options"]["st_scope"] == f"ods-{notion_ods}"
    assert zendesk["options"]["st_provider"] == "zendesk"
    assert zendesk["options"]["st_scope"] == f"ods-{zendesk_ods}"
    assert notion["kwargs"]["document_id"] == notion_doc


def test_kb_enqueue_refuses_an_unknown_record(cli_env: CliRunner) -> None:
    result = cli_env.invoke(main, ["kb", "enqueue", "sync_document", "987654321"])
    assert result.exit_code == 1 and "no knowledge_base_documents row 987654321" in result.output
