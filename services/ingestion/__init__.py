"""Knowledge-base ingestion and retrieval (seed 003), on the indexing kernel
(:mod:`services.indexing`) that knowledge_sync's chunk step shares."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Blueprint

    from router.context import ServiceContext
    from services.ingestion.actors import IngestionActors


def register(platform: ServiceContext) -> None:
    """The ingestion, refresh and connector sync families, the sweep and refresh ticks,
    and the API."""
    from services.ingestion.families import families
    from services.ingestion.ticks import SweepBounds, ingestion_refresh_tick, ingestion_sweep_tick
    from services.ingestion.vector_cache import configure as configure_vector_cache

    settings = platform.settings
    configure_vector_cache(settings.search_cache_mb)
    actors = platform.defer(lambda: _actors(platform))
    for family in families(actors.handlers()):
        platform.add_family(family)
    bounds = SweepBounds(
        limit=settings.ingestion_tick_limit, tenant_slice=settings.ingestion_tenant_slice
    )
    recrawl = settings.recrawl_interval_seconds
    platform.add_tick(ingestion_sweep_tick(platform.sessions, platform.router, bounds))
    platform.add_tick(ingestion_refresh_tick(platform.sessions, platform.router, bounds, recrawl))

    def api_routes() -> list[Blueprint]:
        from services.ingestion.connector_sync.registry import CONNECTORS
        from services.ingestion.routes import blueprint

        ctx = actors.get().ctx
        assert ctx.connectors is not None  # _actors always gives them
        return [
            blueprint(
                chunker=ctx.chunker,
                embedder=ctx.embedder,
                credentials=ctx.connectors.box,
                connectors=CONNECTORS,
            )
        ]

    platform.add_routes(api_routes)


def _actors(platform: ServiceContext) -> IngestionActors:
    """The actor bodies with the chunk/embed component, the fetchers and the connector syncs'
    context (built at their first use)."""
    from services.connectors.nodes import RateLimitState
    from services.connectors.url_crawl import url_fetcher
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import embedder_from_settings
    from services.indexing.ocr import OcrLimits
    from services.ingestion.actors import IngestionActors, IngestionContext
    from services.ingestion.connector_sync.registry import CONNECTORS
    from services.ingestion.connector_sync.sync import SyncContext
    from services.web.feed_fetch import feed_fetcher
    from shared.credentials import CredentialBox
    from tiers.rate_window import RateWindows

    settings = platform.settings
    windows = RateWindows(platform.broker.client, settings.redis_namespace)
    recrawl = settings.recrawl_interval_seconds
    key = settings.connector_credentials_key
    connectors = SyncContext(
        box=CredentialBox.from_setting(key.get_secret_value() if key else None),
        connectors=CONNECTORS,
        provider_urls=settings.provider_urls,
        # a namespace of its own: connection ids are not the super sources' ones
        rate_limits=RateLimitState(
            platform.broker.client,
            f"{settings.redis_namespace}:kb",
            backoff_max_seconds=settings.rate_limit_backoff_max_seconds,
        ),
        timeout=settings.http_timeout_seconds,
        recrawl_interval_seconds=recrawl,
    )
    ctx = IngestionContext(
        chunker=Chunker(),
        embedder=embedder_from_settings(settings, windows=windows),
        # No per-host politeness window: a document's pages are fetched one after another,
        # and a window's Delay would restart a multi-page document from its first page.
        fetch=url_fetcher(settings),
        recrawl_interval_seconds=recrawl,
        fetch_feed=feed_fetcher(
            allow_private=settings.crawl_allow_private_networks,
            timeout=settings.http_timeout_seconds,
            allowed_networks=settings.egress_networks,
        ),
        ocr=OcrLimits(
            max_pages=settings.ocr_max_pages, timeout_seconds=settings.ocr_timeout_seconds
        ),
        connectors=connectors,
    )
    return IngestionActors(platform.sessions, platform.router, ctx)
