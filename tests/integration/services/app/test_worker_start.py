"""A worker's start, on real Redis and PostgreSQL: what it loads and builds before its first
job. How long it takes is the benchmark's (``python -m bench.first_job``); these check what
that time rests on, in fresh interpreters where a start's imports are seen as a starting
worker makes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from router.deferred import deferred_of
from services.app.bootstrap import SERVICE_MODULES, Platform
from services.ingestion.families import ingest_request
from tests.fixtures_platform import MakePlatform
from tests.fresh_process import printed_by
from tests.platform_harness import serving, wait_until

ACTORS = [f"{product}.actors" for product in SERVICE_MODULES]
#: The products with a family in the fast tier.
FAST = {"services.knowledge_sync", "services.ingestion", "services.super_sources"}


@pytest.fixture
def env(redis_url: str, database_url: str, namespace: str, tmp_path: Path) -> dict[str, str]:
    """A worker's environment on this test's Redis namespace and database."""
    return {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
        "SPEEDTIER_DATA_DIR": str(tmp_path / "data"),
        "LOG_LEVEL": "WARNING",
    }


def test_a_worker_registers_every_family_but_builds_only_its_tiers_products_and_later(
    env: dict[str, str], platform: Platform
) -> None:
    script = (
        "import sys\n"
        "from services.app.bootstrap import bootstrap\n"
        "platform = bootstrap(component='worker-fast', defer=True)\n"
        "print(len(platform.registry.kinds()))\n"
        f"print(*[name in sys.modules for name in {ACTORS!r}])\n"
        "print('shared.db.models' in sys.modules, 'requests' in sys.modules)\n"
        "platform.build_deferred('fast')\n"
        f"print(*[name in sys.modules for name in {ACTORS!r}])\n"
        "platform.close()\n"
    )

    words = printed_by(script, env)

    # every family is registered (a job enqueues follow-ups into any tier), as bootstrap
    # registers them for the API
    assert int(words[0]) == len(platform.registry.kinds())
    # but no product's actors, no ORM model and no HTTP client are loaded at bootstrap
    assert words[1 : 1 + len(ACTORS)] == ["False"] * len(ACTORS)
    assert words[1 + len(ACTORS) : 3 + len(ACTORS)] == ["False", "False"]
    # and building the fast tier's parts loads exactly the products with a fast family
    built = dict(zip(ACTORS, words[3 + len(ACTORS) :], strict=True))
    assert {name for name, loaded in built.items() if loaded == "True"} == {
        f"{product}.actors" for product in FAST
    }


def test_a_process_that_is_not_a_worker_builds_every_product_at_bootstrap(
    platform: Platform,
) -> None:
    assert len(platform.deferred) == len(SERVICE_MODULES)
    assert all(part.built for part in platform.deferred)


def test_a_workers_first_job_builds_its_product_at_its_first_call(
    make_platform: MakePlatform,
) -> None:
    # Given a worker's platform (nothing built) and an ingestion job waiting
    platform = make_platform(defer=True)
    families = platform.registry.by_name()
    ingestion, reports = families["ingestion"], families["daily_agent_eval_report"]
    platform.router.enqueue(ingest_request(1, 424242))
    part = deferred_of(ingestion.handler)
    assert part is not None and not part.built

    def settled() -> bool:
        record = platform.broker.jobs.record("ingest-document-424242") or {}
        return record.get("state") == "record_missing"

    # When a fast worker serves it
    with serving(platform.brokers.of_tier("fast"), platform.registry.queues_of_tier("fast")):
        wait_until(settled, timeout=30)
    # Then its handler built the ingestion product (the document is missing: the job ended
    # as record-missing, the outcome its handler gives), and nothing built the reports'
    assert part.built
    reports_part = deferred_of(reports.handler)
    assert reports_part is not None and not reports_part.built


def test_the_fork_server_preloads_every_library_a_worker_loads_before_its_first_job(
    env: dict[str, str],
) -> None:
    script = (
        "import gc, sys\n"
        "import services.app.fork_server\n"
        "from tiers.lua_scripts import link_all, load_script\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
        "linked = load_script.cache_info().currsize\n"
        "print(linked == len(link_all()), linked)\n"
        "loaded, misses = set(sys.modules), load_script.cache_info().misses\n"
        "from services.app.bootstrap import bootstrap\n"
        "platform = bootstrap(component='worker-fast', defer=True)\n"
        "print(load_script.cache_info().misses - misses)\n"
        "new = set(sys.modules) - loaded\n"
        "print(*sorted(n for n in new if n.split('.')[0] not in sys.stdlib_module_names))\n"
        "platform.close()\n"
    )

    words = printed_by(script, env)

    # the collector is back on, and what the preload made is frozen (a child's collections
    # never walk it)
    assert words[:2] == ["True", "True"]
    # every Lua script is linked by the preload (and there are some), so building a
    # child's brokers links none of its own
    assert words[2] == "True" and int(words[3]) > 5
    assert words[4] == "0"
    # and a child forked from it loads no module of its own before it serves, neither a
    # library nor one of the project's (a helper a product's register imports belongs in
    # services.app.fork_server.REGISTERED)
    assert words[5:] == []


def test_a_worker_loads_the_orm_only_when_a_job_opens_a_session(env: dict[str, str]) -> None:
    script = (
        "import sys\n"
        "from sqlalchemy import text\n"
        "import services.app.fork_server\n"
        "from services.app.bootstrap import bootstrap\n"
        "from shared.db.engine import session_scope\n"
        "platform = bootstrap(component='worker-fast', defer=True)\n"
        "print('sqlalchemy.orm' in sys.modules)\n"
        "with session_scope(platform.sessions) as session:\n"
        "    print(session.execute(text('select 41 + 1')).scalar_one())\n"
        "print('sqlalchemy.orm' in sys.modules, platform.sessions.kw['bind'] is platform.engine)\n"
        "platform.close()\n"
    )

    words = printed_by(script, env)

    # neither the fork server's preload nor the bootstrap of a worker loads the ORM; the
    # platform's session factory makes it at its first session, bound to the engine
    assert words == ["False", "42", "True", "True"]


WARM_UP = """
import gc, sys, threading
from services.app.bootstrap import bootstrap
from services.app.warm_up import WarmUp
from tiers.families import Family

platform = bootstrap(component="worker-fast", defer=True)
{extra}
stop = threading.Event()
gc.disable()
warm_up = WarmUp(platform, "fast", stop, delay=0)
warm_up.start()
warm_up.consuming()
warm_up.thread.join(60)
print(stop.is_set(), type(warm_up.failure).__name__, gc.isenabled())
print(*[name in sys.modules for name in {actors!r}])
platform.close()
"""

BROKEN = """
def broken():
    raise RuntimeError("a connector's import failed")

part = platform.defer(broken)
platform.add_family(Family(
    name="t_broken", kind="t_broken", handler=part.handlers().run,
    params="router.ticks:TickParams", job_id=lambda o, p: "broken", fixed_tier="fast",
))
"""


def test_the_warm_up_builds_the_tiers_products_once_the_worker_consumes(
    env: dict[str, str],
) -> None:
    words = printed_by(WARM_UP.format(extra="", actors=ACTORS), env)

    # no stop, no failure, the collector tuned and back on
    assert words[:3] == ["False", "NoneType", "True"]
    built = dict(zip(ACTORS, words[3:], strict=True))
    assert {name for name, loaded in built.items() if loaded == "True"} == {
        f"{product}.actors" for product in FAST
    }


def test_a_product_that_cannot_be_built_stops_the_worker(env: dict[str, str]) -> None:
    words = printed_by(WARM_UP.format(extra=BROKEN, actors=ACTORS), env)

    # the worker is told to stop and keeps the error (its process exits with it)
    assert words[:3] == ["True", "RuntimeError", "True"]
