"""A URL the SSRF guard refuses (private, loopback, link-local...) against real PostgreSQL:
the URL document fails with its own reason naming the address, the crawl ledger records the
same, and a WARNING names the organization, the URL and the address."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from sqlalchemy.orm import Session

from services.indexing.chunking import Chunker
from services.indexing.embedders import HashingEmbedder
from services.ingestion import pipeline, store
from services.knowledge_sync import crawl_ledger
from services.knowledge_sync.crawl_step import crawl_url_step
from services.web.fetch import CrawledPage, fetch_page
from services.web.urls import normalize_url
from shared.db.models import KnowledgeBaseCrawlTask, KnowledgeBaseSource, Organization
from tests.integration.services.ingestion.factories import new_org

GUARD_LOGGER = "shared.egress.addresses"
#: The guard as production runs it: no private networks (the test site's loopback aside).
guarded: Callable[[str], CrawledPage] = partial(
    fetch_page, allow_private=False, timeout=5, allowed_networks=["127.0.0.1/32"]
)


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """Host names the guard resolves to the given addresses."""
    answers: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in answers:
            family = socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers[host]]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers


@pytest.fixture
def redirecting_site() -> Iterator[str]:
    """A loopback site whose every path redirects to the cloud metadata address."""

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def ingest_url(session: Session, organization_id: int, url: str) -> pipeline.IngestOutcome:
    base = store.create_knowledge_base(session, organization_id=organization_id, name="Docs")
    added = store.add_document(
        session,
        organization_id=organization_id,
        knowledge_base_id=base.id,
        name="page",
        source=store.UrlSource(url),
    )
    return pipeline.ingest_document(
        session,
        organization_id=organization_id,
        document_id=added.document.id,
        chunker=Chunker(),
        embedder=HashingEmbedder(384),
        now=datetime.now(UTC),
        fetch=guarded,
    )


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == GUARD_LOGGER and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize(
    ("url", "address", "kind"),
    [
        ("http://10.0.0.1/handbook", "10.0.0.1", "private"),
        ("http://192.168.1.20/", "192.168.1.20", "private"),
        ("http://127.0.0.2:8080/", "127.0.0.2", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254", "link-local"),
        ("http://[::ffff:10.0.0.1]/", "::ffff:10.0.0.1", "private"),
        ("http://0.0.0.0/", "0.0.0.0", "unspecified"),
        ("http://[fe80::1]/", "fe80::1", "link-local"),
    ],
)
def test_a_url_document_to_a_refused_address_fails_with_its_own_reason_and_a_warning(
    session: Session, caplog: pytest.LogCaptureFixture, url: str, address: str, kind: str
) -> None:
    organization_id = new_org()

    with caplog.at_level(logging.WARNING, logger=GUARD_LOGGER):
        outcome = ingest_url(session, organization_id, url)

    assert outcome.status == "failed"
    assert outcome.failure_reason == f"refused: address {address} is {kind}"
    [warning] = warnings_of(caplog)
    assert f"organization {organization_id}" in warning
    assert str(normalize_url(url)) in warning and address in warning and kind in warning


def test_a_redirect_to_a_refused_address_names_both_urls(
    session: Session, caplog: pytest.LogCaptureFixture, redirecting_site: str
) -> None:
    organization_id = new_org()
    requested = f"{redirecting_site}/guide"

    with caplog.at_level(logging.WARNING, logger=GUARD_LOGGER):
        outcome = ingest_url(session, organization_id, requested)

    assert outcome.failure_reason == "refused: address 169.254.169.254 is link-local"
    [warning] = warnings_of(caplog)
    assert f"organization {organization_id} (asked for {requested})" in warning
    assert "refused http://169.254.169.254/latest/meta-data/" in warning


def test_a_crawled_url_resolving_to_a_private_address_is_finished_with_the_reason(
    session: Session, caplog: pytest.LogCaptureFixture, resolver: dict[str, list[str]]
) -> None:
    resolver["intranet.test"] = ["10.1.2.3"]
    organization = Organization(name="crawler")
    session.add(organization)
    session.flush()
    source = KnowledgeBaseSource(organization_id=organization.id, type="url", name="Intranet")
    session.add(source)
    session.flush()
    task = KnowledgeBaseCrawlTask(
        organization_id=organization.id,
        knowledge_base_source_id=source.id,
        root_url="http://intranet.test/",
        max_depth=1,
        max_urls=10,
    )
    session.add(task)
    session.flush()
    scope = {"organization_id": organization.id, "crawl_task_id": task.id}
    crawl_ledger.start(session, **scope)

    with caplog.at_level(logging.WARNING, logger=GUARD_LOGGER):
        result = crawl_url_step(
            session,
            url="http://intranet.test/",
            depth=0,
            fetch=guarded,
            final_attempt=False,
            store_page=lambda page: None,
            **scope,
        )

    assert result.finished and result.page is None
    assert result.error == "refused: address 10.1.2.3 is private"
    [warning] = warnings_of(caplog)
    assert f"organization {organization.id}" in warning
    assert "http://intranet.test/" in warning and "10.1.2.3" in warning
