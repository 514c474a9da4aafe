"""Knowledge sync end to end: a Notion workspace and a website synced for several
organizations at once by real worker processes; shared by the acceptance test
(``tests/e2e/test_knowledge_sync_e2e.py``) and ``python -m bench.kb_sync_e2e``.

What runs:

* a local Notion API (``testkit.fakes.notion_server``) with ``notion_pages`` pages, one
  workspace shared by the organizations, each organization with its own integration token
  (so every provider request is attributed to its organization: ``testkit.kb_fakes``);
* one local website of ``site_pages`` pages per organization, each on its own loopback host
  name (``127.0.0.2``, ``127.0.0.3``...), since the crawler's politeness window is per host;
* a fresh migrated PostgreSQL database and a fresh Redis namespace;
* per organization: one Notion source on its own organization data source and one URL
  source on the site's root;
* the ``kb-sync`` tick body, run once in this process, and then real worker processes
  (``testkit.kb_workers``) that build their platform with
  :func:`services.app.bootstrap.bootstrap` from environment variables alone, until every job
  settled.

What is measured: wall time from the tick to the last settled job; job outcomes and the
runs each provider window admitted (counted by a middleware the worker entry adds, from
the ``st_window`` the windows middleware puts on every run it admits); every window's
counter in Redis, sampled by a process of its own (``testkit.window_sampler``; provider
windows count reservations for future windows too, so they bound the runs each window
admitted from above; the crawler's per-host counters are plain fixed windows); and,
independently, what the providers saw (the Notion fake's and the websites' request logs with
timestamps). The report is put together by ``testkit.kb_report``.

Crawl politeness: production allows one request a second per host (``HostPoliteness``'s
default rule), and nothing in the settings changes it, so a 300-page site takes at least
300 s to crawl. ``host_rate`` (default 10/1) replaces that rule *in the worker processes
this module starts only*, by swapping ``services.web.politeness.HostPoliteness`` for a
subclass with another default rule before bootstrap; pass ``host_rate="1/1"`` for
production's rule.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testkit.kb_fakes import Site, tenant_notion_class
from testkit.kb_report import (
    database_report,
    job_records,
    jobs_report,
    progress,
    window_families,
    window_runs,
    windows_report,
)
from testkit.kb_workers import WorkerProcess, environment_of, start_workers, stop_workers
from testkit.scenario_database import create_database, drop_database, server_database_url
from testkit.window_sampler import SamplerProcess
from tiers.redis_values import as_text

LIVE_STATES = ("waiting", "parked", "delayed", "active")
DEFAULT_WINDOWS = {
    "kb_source_sync.notion": "4/1",
    "kb_document_sync.notion": "20/1",
    "kb_document_chunks.*": "200/1",
}


@dataclass(frozen=True)
class ScenarioConfig:
    """The scenario's size, windows and worker pool.

    Attributes:
      windows: ``SPEEDTIER_WINDOWS`` for every process (``<family>.<provider>`` -> rate).
      host_rate: the crawl politeness rule per host in the workers (production: ``1/1``).
      slow_processes / slow_threads: the slow tier's pool (Notion and crawl units).
      fast_processes / fast_threads: the fast tier's pool (chunks; capped at 4 at once).
      timeout: seconds from the tick until every job must have settled.
    """

    organizations: int = 3
    notion_pages: int = 500
    site_pages: int = 300
    max_depth: int = 10
    max_urls: int = 400
    windows: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_WINDOWS))
    host_rate: str = "10/1"
    slow_processes: int = 2
    slow_threads: int = 8
    fast_processes: int = 1
    fast_threads: int = 4
    timeout: float = 200.0
    poll_ms: int = 100


# -- database ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tenant:
    organization_id: int
    ods_id: int
    notion_source_id: int
    url_source_id: int
    token: str
    site_host: str


def seed(
    sessions: Any, config: ScenarioConfig, tokens: Sequence[str], sites: Sequence[Site]
) -> list[Tenant]:
    """Organizations, each with a Notion data source and source, and a URL source."""
    from shared.db.models.rails import (
        DataSource,
        KnowledgeBaseSource,
        Organization,
        OrganizationDataSource,
    )

    tenants = []
    with sessions() as session:
        notion = DataSource(key="notion", name="Notion")
        session.add(notion)
        session.flush()
        for i, (token, site) in enumerate(zip(tokens, sites, strict=True)):
            org = Organization(name=f"E2E organization {i}")
            session.add(org)
            session.flush()
            ods = OrganizationDataSource(
                organization_id=org.id, data_source_id=notion.id, name=f"Notion {i}"
            )
            session.add(ods)
            session.flush()
            notion_source = KnowledgeBaseSource(
                organization_id=org.id,
                organization_data_source_id=ods.id,
                type="notion",
                name=f"Notion workspace {i}",
                settings={"api_token": token},
            )
            url_source = KnowledgeBaseSource(
                organization_id=org.id,
                type="url",
                name=f"Docs site {i}",
                settings={
                    "url": site.root_url,
                    "max_depth": config.max_depth,
                    "max_urls": config.max_urls,
                },
            )
            session.add_all([notion_source, url_source])
            session.flush()
            tenants.append(
                Tenant(org.id, ods.id, notion_source.id, url_source.id, token, site.host)
            )
        session.commit()
    return tenants


# -- the scenario ------------------------------------------------------------------------------


def settings_values(
    config: ScenarioConfig, redis_url: str, database_url: str, namespace: str, notion_url: str
) -> dict[str, Any]:
    """The settings every process of the scenario runs with (field name -> value)."""
    return {
        "environment": "test",
        "egress_allowed_networks": "127.0.0.1/32",  # the fakes listen on loopback
        "redis_url": redis_url,
        "database_url": database_url,
        "redis_namespace": namespace,
        "data_dir": str(Path(tempfile.gettempdir()) / f"{namespace}-data"),
        "log_level": "WARNING",
        "provider_urls": {"notion": notion_url},
        "windows": dict(config.windows),
        "crawl_allow_private_networks": True,
        "crawl_private_networks_acknowledged": True,
        "http_timeout_seconds": 15.0,
        "worker_poll_ms": config.poll_ms,
        "worker_drain_seconds": 5,
        "flag_cache_seconds": 5.0,
    }


def run_scenario(
    config: ScenarioConfig,
    *,
    redis_url: str,
    log_dir: Path,
    server_db_url: str | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Run the whole scenario and return its measurements (see the module docstring).

    Everything it starts (fakes, database, worker processes, Redis keys) is stopped or
    removed before it returns, also on failure.
    """
    import redis

    from services.app.bootstrap import bootstrap, window_overrides
    from shared.config import load_settings, parse_rate
    from shared.db.engine import make_engine, make_session_factory
    from testkit.fakes.notion_server import populate
    from tiers.policies import WindowRule

    log_dir.mkdir(parents=True, exist_ok=True)
    server_db_url = server_db_url or server_database_url()
    namespace = f"kb-e2e-{uuid.uuid4().hex[:8]}"
    tokens = [f"secret_org_{i}_{uuid.uuid4().hex[:6]}" for i in range(config.organizations)]
    client = redis.Redis.from_url(redis_url)
    host_rule = WindowRule(*parse_rate(config.host_rate, field="host_rate"))

    with contextlib.ExitStack() as stack:
        started = time.monotonic()
        database_url = create_database(server_db_url)
        stack.callback(drop_database, server_db_url, database_url)
        stack.callback(_delete_namespace, client, namespace)

        notion = tenant_notion_class()(tokens)
        populate(notion, config.notion_pages)
        notion_url = stack.enter_context(notion)
        sites = [Site(f"127.0.0.{2 + i}", config.site_pages).start() for i in range(len(tokens))]
        for site in sites:
            stack.callback(site.stop)

        engine = make_engine(database_url)
        stack.callback(engine.dispose)
        tenants = seed(make_session_factory(engine), config, tokens, sites)

        values = settings_values(config, redis_url, database_url, namespace, notion_url)
        platform = bootstrap(load_settings(**values), component="kb-e2e-driver")
        stack.callback(platform.close)
        say(f"set up in {time.monotonic() - started:.1f} s (database {database_url})")

        pool = [("slow", config.slow_threads)] * config.slow_processes + [
            ("fast", config.fast_threads)
        ] * config.fast_processes
        workers = start_workers(pool, environment_of(values), config.host_rate, log_dir)
        stack.callback(stop_workers, workers)
        _wait_for_workers(client, namespace, workers, timeout=60.0)
        say(f"{len(workers)} worker processes up")

        sampling = SamplerProcess.start(redis_url, namespace, log_dir)
        stack.callback(sampling.stop)
        load_before = os.getloadavg()
        t0 = time.time()
        tick_summary = platform.tick("kb-sync").run("e2e")
        say(f"tick: {tick_summary}")
        expected = config.organizations * (config.notion_pages + config.site_pages)
        settled_at, stalled = _wait_until_settled(
            client, namespace, engine, workers, expected, t0, config.timeout, say
        )
        wall = settled_at - t0
        load_after = os.getloadavg()
        sampler = sampling.stop()

        records = job_records(client, namespace)
        outcomes = {
            as_text(k): int(v) for k, v in client.hgetall(f"{namespace}:e2e:outcomes").items()
        }
        runs_by_window = window_runs(client, namespace)
        database = database_report(engine, tenants)
        windows = windows_report(
            sampler,
            runs_by_window,
            platform,
            window_overrides(platform.settings),
            host_rule,
            tenants,
            list(notion.log),
            sites,
        )
        stop_workers(workers)
        exit_codes = {w.name: w.process.returncode for w in workers}
        log_problems = {w.name: w.problems() for w in workers}

    jobs = jobs_report(records, outcomes)
    documents = sum(
        org[kind]["documents"]
        for org in database["organizations"].values()
        for kind in ("notion", "url")
    )
    return {
        "config": asdict(config),
        "namespace": namespace,
        "organizations": [asdict(t) for t in tenants],
        "tick": tick_summary,
        "stalled": stalled,
        "wall_seconds": round(wall, 2),
        "cores": os.cpu_count(),
        "load_average_1m": {"at_tick": load_before[0], "at_settle": load_after[0]},
        "documents": documents,
        "documents_per_second": round(documents / wall, 2) if wall > 0 else None,
        "chunks_written": database["chunks_written"],
        "jobs_run": sum(j["runs"] for j in jobs["jobs"].values()),
        "delays": jobs["delays"],
        "failed_jobs": jobs["failed"],
        "retried_jobs": jobs["retried"],
        "jobs": jobs["jobs"],
        "windows": windows,
        "window_families": window_families(windows),
        "window_sampler": {"polls": sampler.polls, "longest_gap_s": round(sampler.longest_gap, 3)},
        "database": database,
        "provider_requests": {
            "notion": len(notion.log),
            "sites": {site.host: len(site.log) for site in sites},
        },
        "worker_exit_codes": exit_codes,
        "worker_log_errors": sum(len(lines) for lines in log_problems.values()),
        "worker_log_error_samples": {n: lines[:5] for n, lines in log_problems.items() if lines},
        "worker_logs": {w.name: str(w.log_path) for w in workers},
    }


def _delete_namespace(client: Any, namespace: str) -> None:
    batch = list(client.scan_iter(match=f"{namespace}:*", count=2000))
    for start in range(0, len(batch), 1000):
        client.unlink(*batch[start : start + 1000])


def _wait_for_workers(
    client: Any, namespace: str, workers: Sequence[WorkerProcess], timeout: float
) -> None:
    """Until every worker process consumes (its broker's heartbeat is in Redis)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in workers:
            if worker.process.poll() is not None:
                raise RuntimeError(f"worker {worker.name} exited early:\n{worker.tail()}")
        if client.zcard(f"{namespace}:__heartbeats__") >= len(workers):
            return
        time.sleep(0.2)
    raise RuntimeError(f"workers not consuming within {timeout:.0f} s")


def _wait_until_settled(
    client: Any,
    namespace: str,
    engine: Any,
    workers: Sequence[WorkerProcess],
    expected_documents: int,
    t0: float,
    timeout: float,
    say: Callable[[str], None],
) -> tuple[float, bool]:
    """Poll until no job is live twice in a row; returns (when, whether it timed out)."""
    quiet = 0
    last_report = 0.0
    while True:
        now = time.time()
        for worker in workers:
            if worker.process.poll() is not None:
                raise RuntimeError(f"worker {worker.name} died:\n{worker.tail()}")
        records = job_records(client, namespace)
        live = Counter(r["state"] for r in records.values() if r["state"] in LIVE_STATES)
        chunked, total = progress(engine)
        if now - last_report >= 10:
            say(
                f"t+{now - t0:5.1f}s documents {total}/{expected_documents}, chunked {chunked},"
                f" live jobs {dict(live)}"
            )
            last_report = now
        quiet = quiet + 1 if not live else 0
        if quiet >= 2:
            return now, False
        if now - t0 > timeout:
            return now, True
        time.sleep(0.5)
