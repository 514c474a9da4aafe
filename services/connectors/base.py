"""What a Knowledge Library provider gives the sync runs, whatever its API.

A provider client lists a source (documents and sections) and, for providers whose listing
does not carry content, fetches one document. Clients speak the error hierarchy through
:class:`shared.http.JsonClient`: a listing page that fails raises (``Retryable``, ``Delay``
or ``Unrecoverable``) and so aborts the run before anything is removed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from shared.errors import SpeedtierError


class LeaveUntouched(SpeedtierError):
    """The provider will not read this document by design (e.g. a Scribe source connected with
    a session token): the run completes and changes nothing."""


@dataclass(frozen=True)
class SourceConfig:
    """One source as a provider client sees it.

    Attributes:
      source_id / organization_id: the knowledge_base_sources row.
      source_type: the provider (``notion``, ``zendesk``, ``confluence``, ``scribe``, ``url``).
      base_url: where the provider's API answers (configuration overrides win).
      settings: the organization data source's settings merged with the source's own
        (credentials such as ``api_token``, ``email``, ``subdomain``; scope such as
        ``space_keys``, ``locales``, ``brand_ids``, ``root_page_ids``).
      timeout: seconds per HTTP request.
    """

    source_id: int
    organization_id: int
    source_type: str
    base_url: str
    settings: Mapping[str, Any]
    timeout: float = 30.0


@dataclass(frozen=True)
class ListedSection:
    """A section (Zendesk category/section, Confluence space...) with its parent."""

    identifier: str
    name: str
    parent_identifier: str | None = None
    url: str | None = None
    locale: str | None = None
    position: int = 0


@dataclass(frozen=True)
class ListedDocument:
    """A document the provider lists for the source.

    ``identifier`` is stable across runs and unique in the source (for a Zendesk
    translation: ``<article id>:<locale>``). ``content`` is markdown when the listing carries
    it (Zendesk); None means the document sync fetches it (Notion, Confluence, Scribe).
    """

    identifier: str
    title: str
    url: str | None = None
    locale: str | None = None
    updated_at: datetime | None = None
    content: str | None = None
    section_identifiers: tuple[str, ...] = ()


@dataclass(frozen=True)
class Listing:
    """A source's documents and sections.

    ``complete`` is True only when every page and every per-item fetch succeeded: removal of
    documents and sections missing from the listing happens only then (snapshot-safe).
    ``kept_identifiers`` names documents the provider could not re-read this run but that
    must be kept as they are (a Zendesk article whose translations failed keeps its known
    locales).

    ``removal_needs_proof`` says the listing may miss documents that still exist (Notion's
    search is not a complete enumeration): a document it lacks is discarded only when the
    provider proves it gone (:class:`ConfirmsRemoval`), one document at a time.
    """

    documents: list[ListedDocument]
    sections: list[ListedSection] = field(default_factory=list)
    complete: bool = True
    kept_identifiers: frozenset[str] = frozenset()
    removal_needs_proof: bool = False


@dataclass(frozen=True)
class FetchedDocument:
    """One document's current content, as markdown."""

    title: str
    content: str
    url: str | None = None
    updated_at: datetime | None = None


class SourceProvider(Protocol):
    """A provider client. Implementations raise the shared error hierarchy."""

    #: The ``knowledge_base_sources.type`` values this client serves.
    source_types: tuple[str, ...]
    #: True when documents' content comes from ``fetch_document`` (Notion, Confluence,
    #: Scribe); False when the listing carries it (Zendesk).
    fetches_documents: bool

    def list_source(self, config: SourceConfig) -> Listing:
        """Every document and section of the source. Raises on any failed page."""
        ...

    def fetch_document(self, config: SourceConfig, identifier: str) -> FetchedDocument | None:
        """One document's content; None when the provider says it no longer exists (404)."""
        ...


@runtime_checkable
class ConfirmsRemoval(Protocol):
    """A provider whose listing is not authoritative proves removals one by one."""

    def confirm_gone(self, config: SourceConfig, identifiers: Sequence[str]) -> frozenset[str]:
        """The identifiers, among ``identifiers``, the provider says no longer exist (or are
        out of the source's scope). A document it cannot answer for is not in the result;
        a failed request raises (the run retries and removes nothing)."""
        ...


@dataclass(frozen=True)
class ListingPart:
    """One page of a resumable listing (:class:`ResumableListing`).

    Attributes:
      documents / sections: what this page lists.
      complete: False when this page could not list everything it covers (the pass then
        removes nothing).
      fills_gaps: the documents only stand in for ones this pass did not list otherwise (a
        Zendesk locale without its own published translation takes the source locale's).
    """

    documents: list[ListedDocument] = field(default_factory=list)
    sections: list[ListedSection] = field(default_factory=list)
    complete: bool = True
    fills_gaps: bool = False


@runtime_checkable
class ResumableListing(Protocol):
    """A provider whose listing is read page by page and resumes after a ``Delay``, so a
    source bigger than the provider's per-minute budget still finishes."""

    def list_pages(
        self, config: SourceConfig, resume: str | None
    ) -> Iterator[tuple[ListingPart, str | None]]:
        """The listing's pages from ``resume`` (None: the start), each with the opaque
        checkpoint that resumes after it. A failed page raises (``Delay`` included); the
        pages before it were yielded and may be kept."""
        ...
