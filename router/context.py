"""What a service package gets from the process it runs in, and nothing more.

Every product's ``register(platform: ServiceContext)`` and every route, tick and CLI command
it contributes see the process through this protocol; the assembly's ``Platform``
(``services.app.bootstrap``) satisfies it. Defining it here, below the services, lets a
product be typed, read and tested without importing the assembly that loads it.

| member | what a service does with it |
| --- | --- |
| ``settings`` | reads its configuration |
| ``sessions`` | opens units of work on PostgreSQL |
| ``router`` | enqueues follow-up jobs (and, for the API toolkit, lists the registered kinds) |
| ``flags`` | reads kill switches |
| ``broker`` | the control Redis's client: what every tier shares (rate windows, counters) |
| ``brokers`` | each tier's broker: its job store (job state, the slot reaper), its queues |
| ``add_family`` / ``add_tick`` / ``add_routes`` | contributes its jobs, ticks and routes |
| ``add_parity`` | contributes its shadow runs (the dashboard's Parity page) |
| ``defer`` | builds its actors and their contexts at their first use (``router.deferred``) |
| ``tick`` | finds a registered tick (a CLI re-drive) |
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from flask import Blueprint
    from sqlalchemy.orm import Session, sessionmaker

    from router.deferred import Deferred
    from router.enqueue import Router
    from router.ticks import Tick
    from shared.config import Settings
    from shared.flags import Flags
    from shared.parity import ParitySource
    from tiers.broker import TierBroker
    from tiers.families import Family
    from tiers.tier_brokers import TierBrokers

T = TypeVar("T")


class ServiceContext(Protocol):
    """The process as a service package sees it."""

    @property
    def settings(self) -> Settings: ...

    @property
    def sessions(self) -> sessionmaker[Session]: ...

    @property
    def router(self) -> Router: ...

    @property
    def flags(self) -> Flags: ...

    @property
    def broker(self) -> TierBroker: ...

    @property
    def brokers(self) -> TierBrokers: ...

    def add_family(self, family: Family) -> None:
        """Register a job family: its actor and every queue it may use."""

    def add_tick(self, tick: Tick) -> None:
        """Schedule a tick (and register the family its emissions run as)."""

    def add_routes(self, build: Callable[[], Iterable[Blueprint]]) -> None:
        """Serve the blueprints ``build`` returns from the internal API. ``build`` runs when
        the API's app is made: a process that serves no API (a worker, the scheduler) never
        imports the routes, nor Flask, so ``build`` imports them itself."""

    def add_parity(self, product: str, source: ParitySource) -> None:
        """Report ``product``'s shadow runs: ``source(since)`` reads them (the dashboard's
        Parity page calls it per request; it reads Redis or PostgreSQL, never Rails)."""

    def defer(self, build: Callable[[], T]) -> Deferred[T]:
        """A part of the product (its actors) that ``build`` makes when it is first used,
        or before the process serves (``router.deferred`` says when): ``build`` imports
        what the part needs itself."""

    def tick(self, name: str) -> Tick:
        """A registered tick by name.

        Raises:
          KeyError: no tick of that name is registered.
        """


#: Builds the process's context when a CLI command runs (never when the command line is
#: parsed, so ``speedtier --help`` connects to nothing). A product's commands receive it
#: as click's context object: ``@click.pass_obj def command(load: LoadContext)``.
LoadContext = Callable[[], ServiceContext]
