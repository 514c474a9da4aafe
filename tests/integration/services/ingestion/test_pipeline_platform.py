"""Ingestion through the platform: the sweep tick's bounds and ids, and real workers taking
documents to ``ready`` or, on their last attempt, to ``failed``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from services.app.bootstrap import Platform
from services.ingestion import store
from services.ingestion.families import ingest_job_id
from services.ingestion.store import documents_to_ingest
from services.ingestion.ticks import SweepBounds, sweep_processing
from shared.db.models import (
    KbDocument,
    KnowledgeBase,
)
from testkit.fakes.embeddings_server import RATE_LIMITED, running_embeddings_server
from testkit.ports import free_port
from tests.fixtures_platform import MakePlatform
from tests.integration.services.ingestion.factories import new_org
from tests.integration.services.ingestion.pipeline_support import (
    add,
    document,
    make_base,
    utc_now,
    words,
)
from tests.platform_harness import serving
from tiers.policies import RetryPolicy
from tiers.table import TIERS

# -- the sweep tick ------------------------------------------------------------------------


def _processing(session: Session, org: int, base: KnowledgeBase, n: int, t0: datetime, step: int):  # type: ignore[no-untyped-def]
    docs = []
    for i in range(n):
        docs.append(
            store.add_document(
                session,
                organization_id=org,
                knowledge_base_id=base.id,
                name=f"doc-{i}",
                source=store.TextSource(f"text {i}"),
                now=t0 + timedelta(seconds=step * i),
            ).document
        )
    session.flush()
    return docs


def test_the_sweep_takes_the_oldest_first_bounded_overall_and_per_tenant(
    session: Session,
) -> None:
    # The sweep spans tenants: other tests' committed documents in this worker's database
    # would take places, so they are settled here (rolled back with the test).
    session.execute(
        update(KbDocument).where(KbDocument.status == "processing").values(status="failed")
    )
    t0 = utc_now() - timedelta(hours=1)
    big, small, tiny = new_org(), new_org(), new_org()
    bulk = _processing(session, big, make_base(session, big), 30, t0, 1)  # an import
    few = _processing(session, small, make_base(session, small), 3, t0 + timedelta(seconds=5), 10)
    one = _processing(session, tiny, make_base(session, tiny), 1, t0 + timedelta(seconds=100), 1)
    # settled and deleted documents are not swept
    done = _processing(session, tiny, make_base(session, tiny), 2, t0 - timedelta(hours=1), 1)
    done[0].status = "ready"
    store.delete_document(session, organization_id=tiny, document_id=done[1].id)
    session.flush()

    wide = documents_to_ingest(session, limit=100, tenant_slice=4)
    narrow = documents_to_ingest(session, limit=5, tenant_slice=4)

    expected = sorted(
        [*bulk[:4], *few, *one], key=lambda d: (d.submitted_at, d.id)
    )  # four of the import, everything of the others, oldest first
    assert [d.document_id for d in wide] == [d.id for d in expected]
    assert [d.document_id for d in narrow] == [d.id for d in expected[:5]]
    assert {(d.organization_id, d.knowledge_base_id) for d in wide if d.organization_id == big} == {
        (big, bulk[0].knowledge_base_id)
    }


def test_the_sweep_enqueues_under_deterministic_ids_and_a_queued_id_is_a_no_op(
    session: Session, platform: Platform
) -> None:
    org = new_org()
    docs = _processing(session, org, make_base(session, org), 3, utc_now(), 1)
    bounds = SweepBounds(limit=200, tenant_slice=2)

    first = sweep_processing(session, platform.router, bounds)
    second = sweep_processing(session, platform.router, bounds)

    mine = [ingest_job_id(d.id) for d in docs[:2]]
    assert all(platform.broker.jobs.record(job) for job in mine)
    assert platform.broker.jobs.record(ingest_job_id(docs[2].id)) is None  # over the slice
    assert first["added"] >= 2 and first["failed"] == 0
    assert second["added"] == 0 and second["deduplicated"] == first["added"]


# -- through the platform: the families, the tick and a real worker ------------------------


def ingestion_platform(make_platform: MakePlatform, **settings: Any) -> Platform:
    """Ingestion alone, allowed to fetch from 127.0.0.1, its family given three attempts as
    in production and a short backoff so the test watches them all."""
    return make_platform(
        services=["services.ingestion"],
        retries={"ingestion": RetryPolicy(max_attempts=3, base_seconds=0.2)},
        crawl_allow_private_networks=True,
        crawl_private_networks_acknowledged=True,
        http_timeout_seconds=5,
        **settings,
    )


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return ingestion_platform(make_platform)


@contextlib.contextmanager
def worker(platform: Platform) -> Iterator[None]:
    queues = [queue for tier in TIERS for queue in platform.registry.queues_of_tier(tier)]
    with serving(platform.broker, queues, threads=2):
        yield


def wait_for_status(
    factory: sessionmaker[Session], org: int, doc_id: int, status: str, timeout: float = 30
) -> KbDocument:
    deadline = time.monotonic() + timeout
    while True:
        with factory() as session:
            found = document(session, org, doc_id)
        if found.status == status or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def failed_through_a_worker(
    platform: Platform, committed: tuple[sessionmaker[Session], set[int]], name: str
) -> KbDocument:
    """Upload a document ``name`` for a new organization, run a worker until the document
    and its job have both failed (within 30 s and 10 s more), and answer the document."""
    factory, organizations = committed
    org = new_org()
    organizations.add(org)
    with factory() as session:
        doc = add(session, org, make_base(session, org), name, store.TextSource(words(name)))
    platform.router.enqueue(pipeline_request(org, doc.id))
    with worker(platform):
        failed = wait_for_status(factory, org, doc.id, "failed")
        deadline = time.monotonic() + 10
        while platform.broker.jobs.record(ingest_job_id(doc.id))["state"] != "failed":  # type: ignore[index]
            assert time.monotonic() < deadline
            time.sleep(0.05)
    return failed


def test_the_sweep_tick_and_a_worker_take_an_upload_to_ready(
    platform: Platform, committed_fallback: tuple[sessionmaker[Session], set[int]]
) -> None:
    factory, organizations = committed_fallback
    org = new_org()
    organizations.add(org)
    with factory() as session:
        doc = add(session, org, make_base(session, org), "w", store.TextSource(words("w")))

    summary = platform.tick("ingestion-sweep").run("2026-12-01T00:00Z")
    with worker(platform):
        ready = wait_for_status(factory, org, doc.id, "ready")

    assert summary["added"] >= 1 and ready.status == "ready"
    assert platform.broker.jobs.record(ingest_job_id(doc.id))["state"] == "completed"  # type: ignore[index]


def test_a_worker_marks_a_persistently_failing_document_failed_on_its_last_attempt(
    make_platform: MakePlatform,
    committed_fallback: tuple[sessionmaker[Session], set[int]],
) -> None:
    # Given an embedding API that never answers (every attempt is Retryable)
    platform = ingestion_platform(
        make_platform,
        embedder="openai",
        embedding_api_url=f"http://127.0.0.1:{free_port()}/v1",
        embedding_dimensions=384,
    )
    failed = failed_through_a_worker(platform, committed_fallback, "f")

    assert failed.status == "failed" and failed.attempts == 3
    assert (failed.failure_reason or "").startswith("temporary failure persisted after 3 attempts")


def test_an_embedder_answering_429_forever_ends_the_document_failed(
    make_platform: MakePlatform,
    committed_fallback: tuple[sessionmaker[Session], set[int]],
) -> None:
    # Given an embedding API that answers 429 with Retry-After: 0 to every request, and
    # the family's limit of 3 consecutive provider delays per attempt (2 attempts)
    with running_embeddings_server(dimensions=384, retry_after="0") as embeddings:
        embeddings.fail_next(*[RATE_LIMITED] * 10_000)
        platform = make_platform(
            services=["services.ingestion"],
            retries={
                "ingestion": RetryPolicy(max_attempts=2, base_seconds=0.2, max_consecutive_delays=3)
            },
            embedder="openai",
            embedding_api_url=embeddings.base_url,
            embedding_api_key="sk-test",
            embedding_dimensions=384,
        )
        failed = failed_through_a_worker(platform, committed_fallback, "z")

    # Then the document left processing for failed, and the job failed with it
    assert failed.status == "failed"
    assert "kept asking to wait" in (failed.failure_reason or "")
    record = platform.broker.jobs.record(ingest_job_id(failed.id))
    assert record is not None and record["last_error"].startswith("DelaysExhausted")
    # Each attempt: three delays allowed, the fourth request's 429 spent it
    assert len(embeddings.requests) == 8


def pipeline_request(org: int, doc_id: int) -> Any:
    from services.ingestion.families import ingest_request

    return ingest_request(org, doc_id)
