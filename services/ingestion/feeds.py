"""RSS and Atom feeds into a knowledge base: each entry is a document of its own.

:func:`sync_feed` fetches a feed through the web kernel's SSRF-guarded fetcher
(:mod:`services.web.feed_fetch`), parses it with ``feedparser`` (RSS 0.9x/1.0/2.0 and
Atom 0.3/1.0; its HTML is sanitised and relative links resolved) and makes every entry
a ``text`` document bound to the connector ``rss``:

* identity: the entry's ``id`` (RSS ``guid``, Atom ``id``), else its link; the document's
  name is ``rss:`` followed by it (hashed when over 255 characters), so a re-published entry
  refreshes the same document, whatever its title became;
* content: ``# title``, the link, then the entry's content (else its summary) as markdown;
* an entry whose text is unchanged is left alone when its document is ready (no
  re-ingestion); a changed one (or one whose document is failed or still processing)
  replaces the document in place (back to ``processing``; versioned by the ingestion pass);
* at most ``max_entries`` entries per sync, in feed order (newest first in practice).

Failures: a feed that is not RSS or Atom, or too malformed to yield any entry, raises
:class:`FeedUnreadable` (``Unrecoverable``); the fetcher's ``Delay`` (429 with Retry-After),
``Retryable`` (5xx, timeouts) and ``Unrecoverable`` (404, refused address) pass through.

A feed is subscribed as a URL document with ``connector: "rss"``: the ingestion pass and the
refresh job call :func:`feed_document_source` for it instead of crawling a page, so the feed
is re-read on its base's ``refresh_schedule`` (or the platform recrawl) with the same
backoff as a page, and the feed document itself indexes the list of its entries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from services.indexing.digests import text_hash
from services.ingestion import store
from services.web.failures import (
    OVERSIZE,
    UNREACHABLE,
    FetchFailed,
    TransientFailure,
)
from services.web.feed_fetch import FeedFetch
from services.web.html import extract_html
from shared.db.models.ingestion import KbDocument
from shared.egress.addresses import AddressRefused, log_refusal
from shared.errors import Delay, Retryable, Unrecoverable

#: The connector name feed entries are bound to.
RSS_CONNECTOR = "rss"
NAME_PREFIX = "rss:"
DEFAULT_MAX_ENTRIES = 100
_MAX_NAME = 255


class FeedUnreadable(Unrecoverable):
    """The bytes are not a feed feedparser can read any entry from."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class FeedEntry:
    """One entry: its identity (id, else link), title, link and text (markdown)."""

    identity: str
    title: str | None
    link: str | None
    text: str


@dataclass
class FeedSync:
    """What one sync did: document ids added, replaced (changed) and left unchanged."""

    added: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    unchanged: list[int] = field(default_factory=list)
    skipped: int = 0


def parse_feed(data: bytes, url: str) -> list[FeedEntry]:
    """The feed's entries (those with an id or a link and some text), in feed order.

    Raises:
      FeedUnreadable: not RSS or Atom, or malformed beyond reading any entry.
    """
    return _entries(_parse(data, url), url)


def _parse(data: bytes, url: str) -> Any:
    import feedparser  # type: ignore[import-untyped]  # 2 MiB: loaded by the first feed read

    # Bytes, never a str: feedparser would take a str for a URL or a file name.
    return feedparser.parse(data, response_headers={"content-location": url})


def _entries(parsed: Any, url: str) -> list[FeedEntry]:
    entries = [entry for entry in map(lambda raw: _entry(raw, url), parsed.entries) if entry]
    if not entries:
        # A bozo feed with readable entries is kept (feedparser's lenient parser reads
        # much of the web's malformed XML); one that yields nothing is an error, and so is
        # anything that is not a feed. A well-formed feed without entries is empty.
        if parsed.get("bozo"):
            problem = type(parsed.get("bozo_exception")).__name__
            raise FeedUnreadable(f"unreadable feed (malformed: {problem})")
        if not parsed.get("version"):
            raise FeedUnreadable("unreadable feed (not RSS or Atom)")
    return entries


def _entry(raw: Any, url: str) -> FeedEntry | None:
    link = (raw.get("link") or "").strip() or None
    identity = (raw.get("id") or "").strip() or link
    if identity is None:
        return None
    title = " ".join((raw.get("title") or "").split()) or None
    contents = raw.get("content") or []
    html = contents[0].get("value", "") if contents else raw.get("summary", "")
    body = _markdown(html or "", link or url)
    parts = [f"# {title}" if title else "", link or "", body]
    text = "\n\n".join(part for part in parts if part)
    if not body and not title:
        return None
    return FeedEntry(identity, title, link, text)


def _markdown(html: str, base_url: str) -> str:
    if "<" not in html:
        return html.strip()
    _title, markdown, _links = extract_html(f"<html><body>{html}</body></html>", base_url)
    return markdown.strip()


def entry_document_name(identity: str) -> str:
    """``rss:<identity>``, or ``rss:sha256:<hex>`` when that is over 255 characters."""
    name = NAME_PREFIX + " ".join(identity.split())
    if len(name) <= _MAX_NAME:
        return name
    return NAME_PREFIX + "sha256:" + hashlib.sha256(identity.encode()).hexdigest()


def _stored_text_hash(text: str) -> str:
    """The content hash ingestion will record for ``text`` posted as a text document."""
    from services.indexing.extract import extract

    return text_hash(extract(text.encode(), content_type="text/plain", filename=None).text)


@dataclass(frozen=True)
class Feed:
    """A fetched, parsed feed: its title, entries and the text its own document indexes."""

    url: str
    title: str | None
    entries: list[FeedEntry]

    def index_text(self) -> str:
        """The feed document's own text: its title and one line per entry (title, link)."""
        lines = [f"# {self.title or self.url}", "", self.url, ""]
        for entry in self.entries:
            label = entry.title or entry.identity
            lines.append(f"- [{label}]({entry.link})" if entry.link else f"- {label}")
        return "\n".join(lines)


def read_feed(feed_url: str, fetch: FeedFetch) -> Feed:
    """Fetch and parse the feed at ``feed_url``.

    Raises:
      FeedUnreadable: see :func:`parse_feed`.
      Delay / Retryable / Unrecoverable: from the fetcher (429, 5xx, 404, refused address).
    """
    fetched = fetch(feed_url)
    parsed = _parse(fetched.body, fetched.final_url)
    title = " ".join((parsed.get("feed", {}).get("title") or "").split()) or None
    return Feed(feed_url, title, _entries(parsed, fetched.final_url))


def sync_entries(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    entries: list[FeedEntry],
    now: datetime,
    audience: list[str] | None = None,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> FeedSync:
    """Add or refresh one document per entry (the caller commits; the ingestion sweep, or
    the caller, enqueues ``added + changed``)."""
    result = FeedSync(skipped=max(0, len(entries) - max_entries))
    seen: set[str] = set()
    for entry in entries[:max_entries]:
        name = entry_document_name(entry.identity)
        if name in seen:  # a feed repeating an entry: the first one counts
            continue
        seen.add(name)
        existing = _live_document(session, organization_id, knowledge_base_id, name)
        if (
            existing is not None
            and existing.status == "ready"
            and existing.content_hash == _stored_text_hash(entry.text)
        ):
            result.unchanged.append(existing.id)
            continue
        added = store.add_document(
            session,
            organization_id=organization_id,
            knowledge_base_id=knowledge_base_id,
            name=name,
            source=store.TextSource(entry.text),
            audience=audience or [],
            connector=RSS_CONNECTOR,
            now=now,
            cause="feed",
        )
        (result.changed if added.replaced else result.added).append(added.document.id)
    session.flush()
    return result


def sync_feed(
    session: Session,
    *,
    organization_id: int,
    knowledge_base_id: int,
    feed_url: str,
    fetch: FeedFetch,
    now: datetime,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> FeedSync:
    """Fetch the feed and add or refresh one document per entry (the caller commits, then
    enqueues ingestion of ``added + changed``; the sweep finds them anyway).

    Raises:
      RecordMissing: the base is missing or another tenant's.
      FeedUnreadable: see :func:`parse_feed`.
      Delay / Retryable / Unrecoverable: from the fetcher (429, 5xx, 404, refused address).
    """
    store.get_knowledge_base(
        session, organization_id=organization_id, knowledge_base_id=knowledge_base_id
    )
    feed = read_feed(feed_url, fetch)
    return sync_entries(
        session,
        organization_id=organization_id,
        knowledge_base_id=knowledge_base_id,
        entries=feed.entries,
        now=now,
        max_entries=max_entries,
    )


def feed_document_source(
    session: Session,
    document: KbDocument | store.DocumentState,
    fetch: FeedFetch,
    now: datetime,
) -> bytes:
    """For a URL document bound to the ``rss`` connector (the feed's subscription): read the
    feed, add or refresh its entries' documents in the document's base (with the feed
    document's audience), and return the feed document's own text (its index of entries),
    which the pipeline stores as its source and compares on refresh."""
    feed = _read_sorted(document.url or "", fetch, document.organization_id)
    sync_entries(
        session,
        organization_id=document.organization_id,
        knowledge_base_id=document.knowledge_base_id,
        entries=feed.entries,
        now=now,
        audience=list(document.audience or []),
    )
    return feed.index_text().encode()


def _read_sorted(url: str, fetch: FeedFetch, organization_id: int) -> Feed:
    """:func:`read_feed`, its failures sorted as a URL document's are
    (:func:`services.web.failures.fetch_or_fail`): terminal ones are ``FetchFailed`` with the
    seed's reasons, transient ones ``TransientFailure``; an unreadable feed stays
    ``FeedUnreadable``; ``Delay`` passes through."""
    try:
        return read_feed(url, fetch)
    except (Delay, FeedUnreadable, TransientFailure):
        raise
    except AddressRefused as exc:
        log_refusal(exc, organization_id=organization_id, requested=url)
        raise FetchFailed(exc.reason) from exc
    except Unrecoverable as exc:
        raise FetchFailed(OVERSIZE if "content over" in str(exc) else UNREACHABLE) from exc
    except Retryable as exc:
        raise TransientFailure(str(exc), reason=UNREACHABLE) from exc


def _live_document(
    session: Session, organization_id: int, knowledge_base_id: int, name: str
) -> KbDocument | None:
    from sqlalchemy import select

    return session.execute(
        select(KbDocument).where(
            KbDocument.organization_id == organization_id,
            KbDocument.knowledge_base_id == knowledge_base_id,
            KbDocument.name == name,
            KbDocument.deleted_at.is_(None),
        )
    ).scalar_one_or_none()
