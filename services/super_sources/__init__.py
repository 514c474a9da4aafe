"""Super sources (seed 004): import, index and webhook families on the fast and slow tiers,
for every source in the registry (GitHub, Linear, GitLab, Git, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Blueprint

    from router.context import ServiceContext
    from services.super_sources.registry import SourceRegistry


def register(platform: ServiceContext) -> None:
    """The three families and the webhook route, for the default registry's sources."""
    from services.super_sources.sources import default_registry

    install(platform, default_registry())


def install(platform: ServiceContext, registry: SourceRegistry) -> None:
    """The three families and the webhook route, for ``registry``'s sources (a test or a
    plug-in passes its own)."""
    from services.connectors.nodes import RateLimitState
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import embedder_from_settings
    from services.super_sources.actors import SuperSourceActors
    from services.super_sources.context import SuperContext
    from services.super_sources.families import families
    from shared.credentials import CredentialBox
    from tiers.rate_window import RateWindows

    settings = platform.settings
    key = settings.connector_credentials_key
    client = platform.broker.client
    namespace = settings.redis_namespace
    ctx = SuperContext(
        registry=registry,
        rate_limits=RateLimitState(
            client,
            namespace,
            reserves=registry.webhook_reserves(),
            backoff_max_seconds=settings.rate_limit_backoff_max_seconds,
        ),
        chunker=Chunker(),
        embedder=embedder_from_settings(settings, windows=RateWindows(client, namespace)),
        client=client,
        namespace=namespace,
        provider_urls=settings.provider_urls,
        box=CredentialBox.from_setting(key.get_secret_value() if key else None),
        timeout=settings.http_timeout_seconds,
    )
    for family in families(SuperSourceActors(platform.sessions, platform.router, ctx)):
        platform.add_family(family)

    def webhook_routes() -> list[Blueprint]:
        from services.super_sources import routes

        return [routes.blueprint(ctx)]

    platform.add_routes(webhook_routes)
