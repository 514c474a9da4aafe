"""The connector sync's rules on real PostgreSQL and Redis, with an in-memory provider (the
providers' own protocols are tested through their fakes in ``test_connector_providers``):
landing, unchanged items left alone, removal only when proven (a complete full pass, a
per-item 404, or the provider's confirmation), a partial page removing nothing, a Delay
mid-page keeping its progress, failures backing the binding's clock off, single-item
bindings and the refresh tick."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from cryptography.fernet import Fernet
from pydantic import BaseModel
from sqlalchemy import select

from services.app.bootstrap import Platform
from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import ingestion_job, store
from services.ingestion.connector_sync.adapters import (
    PLAIN,
    ConnectorAccess,
    FetchedItem,
    ListedItem,
    ListedPage,
)
from services.ingestion.connector_sync.job import run_sync
from services.ingestion.connector_sync.sync import SyncContext, SyncOutcome, sync_binding
from services.ingestion.families import SYNC_KIND
from services.ingestion.ticks import SweepBounds, connector_sync_requests
from shared.credentials import CredentialBox
from shared.db.base import utcnow
from shared.db.models import KbDocument, KbDocumentVersion
from shared.errors import Delay, RecordMissing, Retryable, Unrecoverable
from tests.fixtures_platform import MakePlatform
from tests.integration.services.ingestion.factories import new_org
from tiers.options import CHECKPOINT

KEY = Fernet.generate_key().decode()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class NoFields(BaseModel):
    pass


@dataclass
class MemoryProvider:
    """A provider in memory: items listed ``page_size`` at a time, in id order."""

    items: dict[str, tuple[str, str, datetime]] = field(default_factory=dict)
    page_size: int = 3
    removal: Literal["listing", "proof"] = "listing"
    incremental: bool = False
    partial_pages: set[int] = field(default_factory=set)
    #: (call kind, nth call of that kind) -> error to raise
    failures: dict[tuple[str, int], Exception] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=lambda: {"list": 0, "fetch": 0, "gone": 0})
    fetched: list[str] = field(default_factory=list)
    hidden: set[str] = field(default_factory=set)

    provider = "google_drive"
    credentials_model = NoFields
    connection_model = NoFields
    settings_model = NoFields
    item_pattern = r".+"
    item_help = "anything"

    def put(self, ident: str, body: str, minutes: int = 0) -> None:
        self.items[ident] = (f"Title {ident}", body, T0 + timedelta(minutes=minutes))

    def _call(self, kind: str) -> None:
        self.calls[kind] += 1
        error = self.failures.pop((kind, self.calls[kind]), None)
        if error is not None:
            raise error

    def default_base_url(self, connection_settings: Any) -> str:
        return "memory://"

    def list_page(
        self, access: ConnectorAccess, checkpoint: str | None, since: str | None
    ) -> ListedPage:
        self._call("list")
        start = int(checkpoint or 0)
        listed = sorted(i for i in self.items if i not in self.hidden)
        chunk = listed[start : start + self.page_size]
        page_number = start // self.page_size
        items = [ListedItem(i, self.items[i][2]) for i in chunk]
        following = start + self.page_size
        return ListedPage(
            items,
            str(following) if following < len(listed) else None,
            complete=page_number not in self.partial_pages,
        )

    def fetch(self, access: ConnectorAccess, external_id: str) -> FetchedItem | None:
        self._call("fetch")
        self.fetched.append(external_id)
        found = self.items.get(external_id)
        if found is None:
            return None
        title, body, modified = found
        return FetchedItem(title, body, PLAIN, f"https://x/{external_id}", modified)

    def confirm_gone(self, access: ConnectorAccess, external_ids: Sequence[str]) -> frozenset[str]:
        self._call("gone")
        return frozenset(i for i in external_ids if i not in self.items)

    def blocked_until(self, access: ConnectorAccess) -> datetime | None:
        return None


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(connector_credentials_key=KEY)


@dataclass
class Bound:
    platform: Platform
    provider: MemoryProvider
    organization_id: int
    knowledge_base_id: int
    binding_id: int
    connection_id: int

    @property
    def ctx(self) -> SyncContext:
        return SyncContext(
            box=CredentialBox.from_setting(KEY), connectors={"google_drive": self.provider}
        )

    def sync(self, **options: Any) -> SyncOutcome:
        return sync_binding(
            self.platform.sessions,
            self.platform.router,
            self.ctx,
            organization_id=self.organization_id,
            binding_id=self.binding_id,
            **options,
        )

    def documents(self) -> dict[str, KbDocument]:
        """Live documents by name."""
        with self.platform.sessions() as session:
            rows = session.scalars(
                select(KbDocument).where(
                    KbDocument.organization_id == self.organization_id,
                    KbDocument.deleted_at.is_(None),
                )
            ).all()
            return {row.name: row for row in rows}

    def ingest_all(self) -> None:
        for document in self.documents().values():
            if document.status == "processing":
                ingestion_job.run_ingestion(
                    self.platform.sessions,
                    organization_id=self.organization_id,
                    document_id=document.id,
                    chunker=Chunker(),
                    embedder=HashingEmbedder(),
                    final_attempt=True,
                    now=utcnow(),
                )

    def binding(self) -> Any:
        with self.platform.sessions() as session:
            return store.get_binding(
                session, organization_id=self.organization_id, binding_id=self.binding_id
            )


def bind(
    platform: Platform,
    provider: MemoryProvider,
    item_id: str | None = None,
    schedule: str | None = None,
) -> Bound:
    org = new_org()
    box = CredentialBox.from_setting(KEY)
    with platform.sessions() as session:
        base = store.create_knowledge_base(
            session, organization_id=org, name="Drive", refresh_schedule=schedule
        )
        connection = store.create_connection(
            session,
            organization_id=org,
            provider="google_drive",
            name="main",
            sealed=box.seal({"access_token": "t"}),
            credential_fields=["access_token"],
            settings={},
        )
        binding = store.create_binding(
            session,
            organization_id=org,
            knowledge_base_id=base.id,
            connection_id=connection.id,
            settings={},
            item_id=item_id,
            audience=["staff"],
        )
        session.commit()
        return Bound(platform, provider, org, base.id, binding.id, connection.id)


def test_a_first_sync_lands_every_item_for_ingestion(platform: Platform) -> None:
    # Given seven items at the provider
    provider = MemoryProvider()
    for i in range(7):
        provider.put(f"f{i}", f"Body number {i}.")
    bound = bind(platform, provider)
    # When the binding syncs
    outcome = bound.sync()
    # Then each item is a document in processing, with its ingestion job enqueued
    assert (outcome.finished, outcome.pages, outcome.landed) == (True, 3, 7)
    documents = bound.documents()
    assert sorted(documents) == [f"Title f{i}" for i in range(7)]
    first = documents["Title f0"]
    assert (first.status, first.kind, first.connector) == ("processing", "file", "google_drive")
    assert (first.url, first.audience, first.submission_cause) == (
        "https://x/f0",
        ["staff"],
        "connector",
    )
    for document in documents.values():
        record = platform.broker.jobs.record(f"ingest-document-{document.id}")
        assert record is not None and record["state"] in ("waiting", "parked")
    # And the ingestion machine makes them ready, versioned as connector syncs
    bound.ingest_all()
    with platform.sessions() as session:
        versions = session.scalars(
            select(KbDocumentVersion).where(
                KbDocumentVersion.organization_id == bound.organization_id
            )
        ).all()
    assert len(versions) == 7 and {v.cause for v in versions} == {"connector"}
    assert all(d.status == "ready" for d in bound.documents().values())
    after = bound.binding()
    assert after.pass_started_at is None and after.last_synced_at is not None
    assert after.next_sync_at > utcnow() + timedelta(hours=23)  # the daily recrawl


def test_a_second_sync_fetches_only_changes_and_removes_what_a_full_pass_missed(
    platform: Platform,
) -> None:
    provider = MemoryProvider()
    for i in range(5):
        provider.put(f"f{i}", f"Body {i}.")
    bound = bind(platform, provider)
    bound.sync()
    bound.ingest_all()
    provider.fetched.clear()
    # Given one item edited, one deleted, one new
    provider.put("f1", "Body 1, edited.", minutes=5)
    del provider.items["f3"]
    provider.put("f9", "A new one.")
    # When the binding syncs again
    outcome = bound.sync()
    # Then only the edited and the new items were fetched, and the deleted one is gone
    assert sorted(provider.fetched) == ["f1", "f9"]
    assert (outcome.landed, outcome.unchanged, outcome.removed) == (2, 3, 1)
    documents = bound.documents()
    assert "Title f3" not in documents and "Title f9" in documents
    assert documents["Title f1"].status == "processing"
    assert documents["Title f0"].status == "ready"


def test_a_partial_page_removes_nothing(platform: Platform) -> None:
    provider = MemoryProvider()
    for i in range(6):
        provider.put(f"f{i}", f"Body {i}.")
    bound = bind(platform, provider)
    bound.sync()
    # Given an item the provider no longer lists, on a pass with an incomplete page
    provider.hidden.add("f4")
    provider.partial_pages.add(1)
    # When it syncs
    outcome = bound.sync()
    # Then the pass completes but keeps the unlisted item's document
    assert outcome.finished and outcome.removed == 0
    assert "Title f4" in bound.documents()
    # And the next complete pass removes it (the item is really gone)
    provider.partial_pages.clear()
    del provider.items["f4"]
    assert bound.sync().removed == 1


def test_a_listing_that_fails_midway_removes_nothing_and_resumes(platform: Platform) -> None:
    provider = MemoryProvider()
    for i in range(9):
        provider.put(f"f{i}", f"Body {i}.")
    bound = bind(platform, provider)
    bound.sync()
    del provider.items["f8"]
    provider.failures[("list", provider.calls["list"] + 2)] = Retryable("HTTP 500")
    with pytest.raises(Retryable):
        bound.sync()
    assert "Title f8" in bound.documents()
    assert bound.binding().checkpoint == "3"  # the first page is committed
    assert bound.sync().removed == 1


def test_a_delay_mid_page_keeps_the_items_handled_and_carries_progress(platform: Platform) -> None:
    provider = MemoryProvider(page_size=10)
    for i in range(6):
        provider.put(f"f{i}", f"Body {i}.")
    bound = bind(platform, provider)
    # Given a provider that asks to wait at the fourth fetch
    provider.failures[("fetch", 4)] = Delay(0.0, reason="retry-after")
    with pytest.raises(Delay) as raised:
        bound.sync()
    # Then the three items landed before it are committed, and the delay says so
    assert raised.value.carry[CHECKPOINT] == f"{bound.binding_id}:start:3"
    assert raised.value.source == "provider"
    assert len(bound.documents()) == 3
    # And the next delivery resumes: the landed items are not fetched again
    provider.fetched.clear()
    assert bound.sync().finished
    assert sorted(provider.fetched) == ["f3", "f4", "f5"]
    assert len(bound.documents()) == 6


def test_removal_by_proof_keeps_what_the_provider_still_has(platform: Platform) -> None:
    provider = MemoryProvider(removal="proof")
    for i in range(4):
        provider.put(f"p{i}", f"Page {i}.")
    bound = bind(platform, provider)
    bound.sync()
    # Given two pages search no longer lists, one of them really deleted
    provider.hidden.update({"p1", "p2"})
    del provider.items["p2"]
    outcome = bound.sync()
    # Then only the one the provider confirms gone is removed
    assert outcome.removed == 1 and provider.calls["gone"] == 1
    assert set(bound.documents()) == {"Title p0", "Title p1", "Title p3"}


def test_an_item_whose_fetch_answers_gone_is_removed(platform: Platform) -> None:
    provider = MemoryProvider()
    provider.put("a", "Alpha.")
    provider.put("b", "Beta.")
    bound = bind(platform, provider)
    bound.sync()
    # The listing still names b (a change feed reporting its removal), the fetch 404s
    provider.put("b", "Beta.", minutes=9)
    body = provider.items.pop("b")
    original = provider.list_page

    def listing(access: ConnectorAccess, cp: str | None, since: str | None) -> ListedPage:
        page = original(access, cp, since)
        return ListedPage([*page.items, ListedItem("b", body[2])], page.checkpoint)

    provider.list_page = listing  # type: ignore[method-assign]
    assert bound.sync().removed == 1
    assert set(bound.documents()) == {"Title a"}


def test_an_unrecoverable_failure_backs_the_clock_off(platform: Platform) -> None:
    provider = MemoryProvider()
    provider.put("a", "Alpha.")
    bound = bind(platform, provider)
    for failures in (1, 2):
        provider.failures[("list", provider.calls["list"] + 1)] = Unrecoverable(
            "GET /files: HTTP 401 (invalid credentials)"
        )
        with pytest.raises(Unrecoverable):
            run_sync(
                platform.sessions,
                platform.router,
                bound.ctx,
                organization_id=bound.organization_id,
                binding_id=bound.binding_id,
                final_attempt=False,
            )
        binding = bound.binding()
        assert binding.sync_failures == failures
        assert binding.last_error == "Unrecoverable: GET /files: HTTP 401 (invalid credentials)"
        wait = binding.next_sync_at - utcnow()
        assert (
            timedelta(days=2**failures) - timedelta(minutes=5) < wait <= timedelta(days=2**failures)
        )
    # A transient failure before the last attempt is the platform's to retry, not recorded
    provider.failures[("list", provider.calls["list"] + 1)] = Retryable("HTTP 503")
    with pytest.raises(Retryable):
        run_sync(
            platform.sessions,
            platform.router,
            bound.ctx,
            organization_id=bound.organization_id,
            binding_id=bound.binding_id,
            final_attempt=False,
        )
    assert bound.binding().sync_failures == 2
    # A success resets the clock
    run_sync(
        platform.sessions,
        platform.router,
        bound.ctx,
        organization_id=bound.organization_id,
        binding_id=bound.binding_id,
    )
    binding = bound.binding()
    assert (binding.sync_failures, binding.last_error) == (0, None)


def test_a_single_item_binding_refreshes_its_document(platform: Platform) -> None:
    provider = MemoryProvider()
    provider.put("page-1", "Version one.")
    bound = bind(platform, provider, item_id="page-1", schedule="hourly")
    # The first sync creates the document
    assert bound.sync().landed == 1
    bound.ingest_all()
    document_id = bound.binding().document_id
    assert document_id is not None
    # A scheduled sync after an edit refreshes it (cause refresh); an unchanged one does not
    provider.put("page-1", "Version two.", minutes=1)
    assert bound.sync(scheduled=True).landed == 1
    bound.ingest_all()
    assert bound.sync(scheduled=True).unchanged == 1
    with platform.sessions() as session:
        kept = store.list_versions(
            session, organization_id=bound.organization_id, document_id=document_id
        )
        document = store.get_document(
            session, organization_id=bound.organization_id, document_id=document_id
        )
    assert sorted((v.version, v.cause) for v in kept) == [(1, "connector"), (2, "refresh")]
    assert document.next_refresh_at is not None
    assert timedelta(minutes=55) < document.next_refresh_at - utcnow() <= timedelta(hours=1)
    # The provider says the page is gone: the document is deleted
    del provider.items["page-1"]
    assert bound.sync(scheduled=True).removed == 1
    assert bound.documents() == {}


def test_the_refresh_tick_syncs_due_bindings_only(platform: Platform) -> None:
    provider = MemoryProvider()
    provider.put("a", "Alpha.")
    bound = bind(platform, provider, schedule="weekly")

    def due() -> set[int]:
        with platform.sessions() as session:
            requests = connector_sync_requests(session, SweepBounds(10_000, 10_000))
        assert all(r.kind == SYNC_KIND and r.params["scheduled"] for r in requests)
        return {r.params["binding_id"] for r in requests}

    assert bound.binding_id in due()  # new: due at once
    bound.sync()
    assert bound.binding_id not in due()
    assert bound.binding().next_sync_at - utcnow() > timedelta(days=6)
    # A deleted base's bindings go with it
    with platform.sessions() as session:
        store.delete_knowledge_base(
            session,
            organization_id=bound.organization_id,
            knowledge_base_id=bound.knowledge_base_id,
        )
        session.commit()
    with pytest.raises(RecordMissing):
        bound.binding()


def test_another_organizations_binding_is_missing(platform: Platform) -> None:
    provider = MemoryProvider()
    bound = bind(platform, provider)
    with pytest.raises(RecordMissing):
        sync_binding(
            platform.sessions,
            platform.router,
            bound.ctx,
            organization_id=bound.organization_id + 1,
            binding_id=bound.binding_id,
        )


def test_credentials_under_a_dropped_key_fail_unrecoverable(platform: Platform) -> None:
    provider = MemoryProvider()
    bound = bind(platform, provider)
    other = SyncContext(
        box=CredentialBox.from_setting(Fernet.generate_key().decode()),
        connectors={"google_drive": provider},
    )
    run: Callable[[], object] = lambda: run_sync(  # noqa: E731
        platform.sessions,
        platform.router,
        other,
        organization_id=bound.organization_id,
        binding_id=bound.binding_id,
    )
    with pytest.raises(Unrecoverable, match="store them again"):
        run()
    assert bound.binding().last_error.startswith("CredentialsUnreadable")


def test_one_unreadable_item_does_not_stop_the_pass(platform: Platform) -> None:
    provider = MemoryProvider(page_size=10)
    for i in range(4):
        provider.put(f"f{i}", f"Body {i}.")
    bound = bind(platform, provider)
    bound.sync()
    # Given the provider refusing one edited file (its permissions changed, say)
    provider.put("f1", "Body 1, edited.", minutes=3)
    provider.put("f2", "Body 2, edited.", minutes=3)
    provider.failures[("fetch", provider.calls["fetch"] + 1)] = Unrecoverable(
        "GET /files/f1: HTTP 403 (invalid credentials)"
    )
    # When it syncs, the pass goes on: the other edit lands, the refused file is kept
    outcome = bound.sync(full=True)
    assert outcome.finished and outcome.landed == 1 and outcome.removed == 0
    assert set(bound.documents()) == {f"Title f{i}" for i in range(4)}
    assert bound.binding().last_error == (
        "1 item(s) could not be read, e.g. f1: GET /files/f1: HTTP 403 (invalid credentials)"
    )


def test_a_transient_fetch_failure_keeps_what_landed_before_it(platform: Platform) -> None:
    provider = MemoryProvider(page_size=10)
    for i in range(5):
        provider.put(f"f{i}", f"Body {i}.")
    bound = bind(platform, provider)
    provider.failures[("fetch", 3)] = Retryable("HTTP 502")
    with pytest.raises(Retryable):
        bound.sync()
    assert set(bound.documents()) == {"Title f0", "Title f1"}
    provider.fetched.clear()
    assert bound.sync().finished
    assert sorted(provider.fetched) == ["f2", "f3", "f4"]
