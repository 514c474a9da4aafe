"""Super sources (seed 004): import, index and webhook families on the fast and slow tiers,
for every source in the registry (GitHub, Linear, GitLab, Git, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from flask import Blueprint

    from router.context import ServiceContext
    from services.super_sources.actors import SuperSourceActors
    from services.super_sources.registry import SourceRegistry


def register(platform: ServiceContext) -> None:
    """The three families and the webhook route, for the default registry's sources (its
    connectors are imported with the actors, at their first use)."""
    from services.super_sources.sources import default_registry

    _install(platform, default_registry)


def install(platform: ServiceContext, registry: SourceRegistry) -> None:
    """The three families and the webhook route, for ``registry``'s sources (a test or a
    plug-in passes its own)."""
    _install(platform, lambda: registry)


def _install(platform: ServiceContext, registry: Callable[[], SourceRegistry]) -> None:
    from services.super_sources.families import families

    actors = platform.defer(lambda: _actors(platform, registry()))
    for family in families(actors.handlers()):
        platform.add_family(family)

    def webhook_routes() -> list[Blueprint]:
        from services.super_sources import routes

        return [routes.blueprint(actors.get().ctx)]

    platform.add_routes(webhook_routes)


def _actors(platform: ServiceContext, registry: SourceRegistry) -> SuperSourceActors:
    """The actor bodies with their context: credentials, rate-limit state, the chunk/embed
    component (built at their first use)."""
    from services.connectors.nodes import RateLimitState
    from services.indexing.chunking import Chunker
    from services.indexing.embedders import embedder_from_settings
    from services.super_sources.actors import SuperSourceActors
    from services.super_sources.context import SuperContext
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
    return SuperSourceActors(platform.sessions, platform.router, ctx)
