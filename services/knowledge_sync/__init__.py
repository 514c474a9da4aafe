"""Knowledge Library sync (seed 000): sources, documents, chunks and crawls from providers."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Blueprint

    from router.context import ServiceContext
    from services.knowledge_sync.actors import KnowledgeSyncActors


def register(platform: ServiceContext) -> None:
    """Families, the daily tick and the enqueue route Rails calls."""
    from services.knowledge_sync.families import families
    from services.knowledge_sync.ticks import daily_sync_tick

    actors = platform.defer(lambda: _actors(platform))
    for family in families(actors.handlers()):
        platform.add_family(family)
    platform.add_tick(daily_sync_tick(platform.sessions, platform.router))
    platform.add_routes(_routes)


def _actors(platform: ServiceContext) -> KnowledgeSyncActors:
    """The actor bodies with their sync and crawl contexts (built at their first use)."""
    from services.connectors.registry import PROVIDERS, default_base_url
    from services.connectors.url_crawl import url_fetcher
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import embedder_from_settings
    from services.knowledge_sync.actors import KnowledgeSyncActors
    from services.knowledge_sync.crawl_units import CrawlContext
    from services.knowledge_sync.sync_units import SyncContext
    from tiers.rate_window import RateWindows

    settings = platform.settings
    windows = RateWindows(platform.broker.client, settings.redis_namespace)
    sync = SyncContext(
        providers=PROVIDERS,
        provider_urls=settings.provider_urls,
        default_url=default_base_url,
        timeout=settings.http_timeout_seconds,
        chunker=Chunker(),
        embedder=embedder_from_settings(settings, windows=windows),
    )
    crawl = CrawlContext(fetch=url_fetcher(settings, windows=windows))
    return KnowledgeSyncActors(platform.sessions, platform.router, sync, crawl)


def _routes() -> list[Blueprint]:
    from services.knowledge_sync import routes

    return [routes.blueprint()]
