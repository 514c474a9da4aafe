"""The platform under test: one factory fixture, ``make_platform``, and ``platform``, its default.

``make_platform(...)`` bootstraps a :class:`~services.app.bootstrap.Platform` on this test's
Redis namespace and migrated database (the ``namespace`` and ``database_url`` fixtures) and
closes every platform it built when the test ends. What tests vary is a parameter:

=====================  ====================================================================
parameter              default
=====================  ====================================================================
``services``           the production service modules (``bootstrap.SERVICE_MODULES``)
``families``           none; families added after bootstrap (the harness's ``t_plain``...)
``retries``            none; ``{family name: RetryPolicy}`` replacing a family's policy (a
                       short backoff a test can wait out)
``component``          ``"speedtier"`` (the name in logs and Sentry)
``defer``              False: the products' actors built at bootstrap; True leaves them to
                       their first use, as a worker does (``router.deferred``)
``**settings``         any ``Settings`` field by name (``provider_urls``, ``windows``,
                       ``api_max_body_bytes``, ``redis_url``/``database_url`` for an outage
                       test...), over ``environment="test"``, ``internal_api_token=TOKEN``,
                       ``connector_credentials_key=CREDENTIALS_KEY`` (stored credentials are
                       sealed; ``None`` for a keyless platform), ``flag_cache_seconds=0``
                       (a flag a test sets is read at once) and
                       ``egress_allowed_networks="127.0.0.1/32"`` (the fakes' address)
=====================  ====================================================================

A package or module whose platform differs overrides ``platform`` with one call to
``make_platform``; presets belong to their domain's factories (knowledge sync's
``knowledge_sync_settings()``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import pytest
from flask import Flask
from flask.testing import FlaskClient

from services.app.bootstrap import Platform, bootstrap
from shared.config import load_settings
from tiers.families import Family
from tiers.policies import RetryPolicy

#: Strong enough for production's floor (``shared.secret_strength``): some tests run production.
TOKEN = "suite-internal-token-7Hq2Xv9Lm4Rt8Wz1Kc6Nb3Pd5"
#: The suite's credentials key (a Fernet key made for it, no secret of any deployment).
CREDENTIALS_KEY = "Q2W6a9lVtrG7s3wKpZ0tqg1yUe8Hn5mXc4bJd2fRkLo="
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class MakePlatform(Protocol):
    def __call__(
        self,
        *,
        services: Sequence[str] | None = None,
        families: Iterable[Family] = (),
        retries: Mapping[str, RetryPolicy] | None = None,
        component: str = "speedtier",
        defer: bool = False,
        **settings: Any,
    ) -> Platform: ...


@pytest.fixture
def make_platform(redis_url: str, database_url: str, namespace: str) -> Iterator[MakePlatform]:
    built: list[Platform] = []

    def build(
        *,
        services: Sequence[str] | None = None,
        families: Iterable[Family] = (),
        retries: Mapping[str, RetryPolicy] | None = None,
        component: str = "speedtier",
        defer: bool = False,
        **settings: Any,
    ) -> Platform:
        values: dict[str, Any] = {
            "redis_url": redis_url,
            "database_url": database_url,
            "redis_namespace": namespace,
            "environment": "test",
            "internal_api_token": TOKEN,
            "connector_credentials_key": CREDENTIALS_KEY,
            "flag_cache_seconds": 0,
            "egress_allowed_networks": "127.0.0.1/32",  # the fakes' loopback address
            **settings,
        }
        options: dict[str, Any] = {"component": component, "defer": defer}
        if services is not None:
            options["services"] = services
        platform = bootstrap(load_settings(**values), **options)
        built.append(platform)
        for family in families:
            platform.add_family(family)
        by_name = platform.registry.by_name()
        for name, policy in (retries or {}).items():
            by_name[name] = dataclasses.replace(by_name[name], retry=policy)
        return platform

    yield build
    for platform in built:
        platform.close()


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    """The production services on this test's namespace and database."""
    return make_platform()


@pytest.fixture
def app(platform: Platform) -> Flask:
    """The internal API's Flask app over ``platform`` (a module's own ``platform`` too)."""
    from services.app.api import create_app

    return create_app(platform)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()
