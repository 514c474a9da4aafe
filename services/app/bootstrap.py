"""The one place that assembles a process: settings, Sentry, broker, middleware, router,
flags, database, and every service's families, ticks and routes."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import dramatiq
from sqlalchemy import Engine

from router.context import ServiceContext
from router.deferred import Deferred, deferred_of
from router.enqueue import Router
from router.registry import Registry
from router.tick_monitors import MonitorSettings
from router.ticks import Tick, tick_family
from shared import runtime_file
from shared.config import InvalidSettings, Settings, load_settings, parse_rate, refusals
from shared.db.engine import lazy_session_factory, make_engine
from shared.egress.addresses import set_default_guard, settings_guard
from shared.errors import NotConfigured
from shared.flags import Flags
from shared.observability import ACTOR_THROWS, configure_logging, init_sentry
from shared.parity import ParitySource
from shared.redis_persistence import verify_redis_persistence
from shared.rollouts import PostHogRollouts
from shared.tracing import configure_tracing
from tiers.broker import TierBroker
from tiers.families import Family
from tiers.middleware.group_slots import GroupSlots
from tiers.middleware.tracing import JobTracing
from tiers.policies import WindowRule
from tiers.stack import build_tier_brokers
from tiers.table import TIERS
from tiers.tier_brokers import TierBrokers

if TYPE_CHECKING:
    from flask import Blueprint
    from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Service packages, each exposing ``register(platform: ServiceContext)``.
SERVICE_MODULES: tuple[str, ...] = (
    "services.maintenance",
    "services.knowledge_sync",
    "services.ingestion",
    "services.reports",
    "services.super_sources",
    "services.uploads",
)


@dataclass
class Platform:
    """Everything a process needs, built once by :func:`bootstrap`."""

    settings: Settings
    registry: Registry
    #: Each tier's broker (``tiers.tier_brokers`` says what lives on which Redis).
    brokers: TierBrokers
    router: Router
    flags: Flags
    engine: Engine
    sessions: sessionmaker[Session]
    slots: GroupSlots
    ticks: list[Tick] = field(default_factory=list)
    #: Each product's route builders (``add_routes``); :meth:`blueprints` runs them.
    route_builders: list[Callable[[], Iterable[Blueprint]]] = field(default_factory=list)
    #: Each product's shadow-run source by product name (``add_parity``).
    parity_sources: dict[str, ParitySource] = field(default_factory=dict)
    #: The products' parts built at their first use (``add_family`` handlers call into them).
    deferred: list[Deferred[Any]] = field(default_factory=list)
    _blueprints: list[Blueprint] | None = field(default=None, init=False, repr=False)

    @property
    def broker(self) -> TierBroker:
        """The broker on the control Redis (``REDIS_URL``): its client holds what every tier
        shares (windows, locks, counters); it is also every tier's broker on one Redis."""
        return self.brokers.control

    def add_family(self, family: Family) -> None:
        """Register a family and declare its actor on every broker (a worker runs it from
        its tier's) and each of its queues on its tier's broker."""
        self.registry.add(family)
        for broker in self.brokers.every():
            dramatiq.Actor(
                family.handler,
                broker=broker,
                actor_name=family.name,
                queue_name=family.queues()[0],
                priority=family.priority,
                options={
                    "time_limit": int(family.time_limit_seconds * 1000),
                    "throws": ACTOR_THROWS,
                },
            )
        for queue in family.queues():
            self.brokers.of_queue(queue).declare_queue(queue)

    def add_tick(self, tick: Tick) -> None:
        self.ticks.append(tick)
        self.add_family(tick_family(tick, self.monitor_settings))

    @property
    def monitor_settings(self) -> MonitorSettings:
        """The ticks' Sentry cron monitor settings."""
        return MonitorSettings(
            self.settings.sentry_checkin_margin_minutes, self.settings.sentry_max_runtime_minutes
        )

    def add_routes(self, build: Callable[[], Iterable[Blueprint]]) -> None:
        self.route_builders.append(build)
        self._blueprints = None

    def add_parity(self, product: str, source: ParitySource) -> None:
        self.parity_sources[product] = source

    def defer(self, build: Callable[[], T]) -> Deferred[T]:
        part = Deferred(build)
        self.deferred.append(part)
        return part

    def build_deferred(self, tier: str | None = None) -> None:
        """Build the deferred parts the families of ``tier`` (or every part) call into."""
        if tier is None:
            parts = self.deferred
        else:
            queues = set(self.registry.queues_of_tier(tier))
            handlers = [f.handler for f in self.registry if queues & set(f.queues())]
            used = {id(d) for h in handlers if (d := deferred_of(h)) is not None}
            parts = [d for d in self.deferred if id(d) in used]
        for part in parts:
            part.get()

    def blueprints(self) -> list[Blueprint]:
        """The products' blueprints, built at the first call (the API's app factory), so a
        worker or the scheduler never loads the routes or Flask."""
        if self._blueprints is None:
            self._blueprints = [bp for build in self.route_builders for bp in build()]
        return self._blueprints

    def tick(self, name: str) -> Tick:
        for tick in self.ticks:
            if tick.name == name:
                return tick
        known = ", ".join(t.name for t in self.ticks)
        raise KeyError(f"unknown tick {name!r}; known: {known}")

    def close(self) -> None:
        if self.flags.rollouts is not None:
            self.flags.rollouts.close()
        self.brokers.close()
        self.engine.dispose()


def window_overrides(settings: Settings) -> dict[str, WindowRule]:
    return {
        key: WindowRule(*parse_rate(rate, field=f"SPEEDTIER_WINDOWS[{key}]"))
        for key, rate in settings.windows.items()
    }


def rollouts(settings: Settings) -> PostHogRollouts | None:
    """The PostHog rollout flags the settings describe (None without a personal API key:
    every rollout flag off)."""
    personal, project = settings.posthog_personal_api_key, settings.posthog_project_api_key
    if personal is None or project is None:
        return None
    return PostHogRollouts(
        project_api_key=project.get_secret_value(),
        personal_api_key=personal.get_secret_value(),
        host=settings.posthog_host,
        poll_seconds=settings.posthog_poll_seconds,
        region=settings.region,
    )


def warn_if_private_networks(settings: Settings) -> None:
    """Say at every start that the SSRF guard is off (``crawl_allow_private_networks``)."""
    if settings.crawl_allow_private_networks:
        log.warning(
            "SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true (acknowledged): the crawler and the "
            "connectors may reach loopback, private and link-local addresses, cloud metadata "
            "included; the SSRF guard is OFF in this process"
        )


def bootstrap(
    settings: Settings | None = None,
    *,
    services: Sequence[str] = SERVICE_MODULES,
    component: str = "speedtier",
    defer: bool = False,
    redis_checked: bool = False,
    **broker_options: Any,
) -> Platform:
    """Build a process's platform.

    Parameters:
      settings: defaults to the environment.
      services: service modules to register (tests pass their own).
      component: a name for logs and Sentry (``worker-fast``, ``api``, ...).
      defer: leave the products' deferred parts (``router.deferred``) to their first use or
        to :meth:`Platform.build_deferred` (a worker); False builds them before returning.
      redis_checked: the caller has checked the persistence of ``settings``' Redis already
        (a worker pool's parent, before its children start), so this process does not.
      broker_options: passed to every :class:`TierBroker` (tests shorten timeouts).

    Raises:
      shared.redis_persistence.VolatileRedis: production or staging on a Redis without AOF.
    """
    settings = runtime_file.resolve(settings or load_settings())
    redis_url = settings.redis_url
    if not redis_url:
        raise NotConfigured("REDIS_URL is not set (speedtier up starts an embedded Redis)")
    if not settings.database_url:
        raise NotConfigured("DATABASE_URL is not set (speedtier up starts an embedded PostgreSQL)")
    refused = refusals(settings)  # settings built without load_settings are held to it too
    if refused:
        raise InvalidSettings(
            f"refusing to start in SPEEDTIER_ENV={settings.environment}: {refused[0]}"
        )
    configure_logging(settings.log_level, json_lines=settings.json_logs)
    set_default_guard(settings_guard(settings))  # every outbound call of the process
    warn_if_private_networks(settings)
    if not redis_checked:
        verify_redis_persistence(settings)  # refuses volatile Redis in production and staging
    init_sentry(settings.sentry_dsn, environment=settings.environment, component=component)
    tracing_on = configure_tracing(settings.otlp_endpoint, component=component)

    registry = Registry()
    families = registry.by_name()
    engine = make_engine(settings.database_url)
    flags = Flags(engine, settings.flag_overrides, settings.flag_cache_seconds, rollouts(settings))
    brokers, slots = build_tier_brokers(
        redis_url=redis_url,
        tier_redis_urls={tier: settings.tier_redis_url(tier) or redis_url for tier in TIERS},
        namespace=settings.redis_namespace,
        families=families,
        is_enabled=flags.is_enabled,
        windows=window_overrides(settings),
        lease_seconds=settings.group_lease_seconds,
        heartbeat_timeout_ms=int(settings.heartbeat_timeout_seconds * 1000),
        cancel_grace_seconds=settings.cancel_grace_seconds,
        max_unsettled=settings.max_unsettled_runs,
        **broker_options,
    )

    if tracing_on:
        for broker in brokers.every():
            broker.add_middleware(JobTracing())
    platform = Platform(
        settings=settings,
        registry=registry,
        brokers=brokers,
        router=Router(registry, brokers),
        flags=flags,
        engine=engine,
        sessions=lazy_session_factory(engine),
        slots=slots,
    )
    context: ServiceContext = platform  # the protocol every service's register() is typed on
    for name in services:
        importlib.import_module(name).register(context)
    if not defer:
        platform.build_deferred()
    return platform
