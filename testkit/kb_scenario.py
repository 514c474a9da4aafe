"""Knowledge sync end to end: a Notion workspace and a website synced for several
organizations at once by real worker processes; shared by the acceptance test
(``tests/e2e/test_knowledge_sync_e2e.py``) and ``python -m bench.kb_sync_e2e``.

What runs:

* a local Notion API (``testkit.fakes.notion_server``) with ``notion_pages`` pages, one
  workspace shared by the organizations, each organization with its own integration token
  (so every provider request is attributed to its organization);
* one local website of ``site_pages`` pages per organization, each on its own loopback host
  name (``127.0.0.2``, ``127.0.0.3``...), since the crawler's politeness window is per host;
* a fresh migrated PostgreSQL database and a fresh Redis namespace;
* per organization: one Notion source on its own organization data source and one URL
  source on the site's root;
* the ``kb-sync`` tick body, run once in this process, and then real worker processes
  (``python -m testkit.kb_scenario worker --tier ...``) that build their platform with
  :func:`services.app.bootstrap.bootstrap` from environment variables alone, until every job
  settled.

What is measured: wall time from the tick to the last settled job; job outcomes and the
runs each provider window admitted (counted by a middleware the worker entry adds, from
the ``st_window`` the windows middleware puts on every run it admits); every window's
counter in Redis, sampled (provider windows count reservations for future windows too, so
they bound the runs each window admitted from above; the crawler's per-host counters are
plain fixed windows); and, independently, what the providers saw (the Notion fake's and
the websites' request logs with timestamps).

Crawl politeness: production allows one request a second per host (``HostPoliteness``'s
default rule), and nothing in the settings changes it, so a 300-page site takes at least
300 s to crawl. ``host_rate`` (default 10/1) replaces that rule *in the worker processes
this module starts only*, by swapping ``services.web.politeness.HostPoliteness`` for a subclass with
another default rule before bootstrap; pass ``host_rate="1/1"`` for production's rule.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from testkit.scenario_database import create_database, drop_database, server_database_url
from tiers.redis_values import as_text

ROOT = Path(__file__).resolve().parent.parent
#: Read by the worker entry only: the crawl politeness rule per host, ``LIMIT/SECONDS``.
HOST_RATE_ENV = "KB_SCENARIO_CRAWL_HOST_RATE"
CHUNK_SOURCE_TYPE = "KnowledgeBaseDocument"
KB_FAMILIES = (
    "kb_source_sync",
    "kb_document_sync",
    "kb_document_chunks",
    "kb_crawl_start",
    "kb_crawl_url",
)
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


# -- fakes -------------------------------------------------------------------------------------


def _notion_server_class() -> type[Any]:
    from testkit.fakes.notion_server import NotionServer

    class TenantNotion(NotionServer):
        """The Notion fake, accepting one token per organization and logging every
        authorized request as ``(epoch seconds, token, method, path)``."""

        def __init__(self, tokens: Sequence[str]) -> None:
            super().__init__(token=tokens[0])
            self.tokens = frozenset(tokens)
            self.log: list[tuple[float, str, str, str]] = []

        def authorized(self, request: Any) -> bool:
            header = request.headers.get("authorization", "")
            return header.startswith("Bearer ") and header[7:] in self.tokens

        def route(self, request: Any) -> Any:
            token = request.headers["authorization"][7:]
            self.log.append((time.time(), token, request.method, request.path))
            return super().route(request)

    return TenantNotion


def site_page(index: int, pages: int) -> str:
    """Page ``index`` of a ``pages``-page site: a tree (links to ``2i+1`` and ``2i+2``), a
    cross link, and links the crawler must not follow (another host, mailto, javascript,
    nofollow). Page 0 also links a page robots.txt disallows."""
    children = "".join(
        f'<li><a href="/page/{c}">Child {c}</a></li>'
        for c in (2 * index + 1, 2 * index + 2)
        if c < pages
    )
    cross = (index * 7 + 3) % pages
    private = '<a href="/private/members">members</a>' if index == 0 else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Page {index} | Docs</title></head>
<body><nav><a href="/page/0">Home</a></nav>
<main><h1>Article {index}</h1>
<p>Article {index} explains topic {index % 17} in some detail. {"Lorem ipsum. " * 20}</p>
<ul>{children}</ul>
<p>See also <a href="/page/{cross}#section">article {cross}</a>,
<a href="https://external.example/page/{index}">elsewhere</a>,
<a href="mailto:docs@example.com">mail</a>, <a href="javascript:void(0)">script</a>,
<a href="/nofollow/{index}" rel="nofollow">not followed</a> {private}</p>
</main></body></html>"""


class Site:
    """A website on ``host`` (a loopback address), logging ``(epoch seconds, path)``."""

    def __init__(self, host: str, pages: int) -> None:
        self.host = host
        self.pages = pages
        self.log: list[tuple[float, str]] = []
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self._server.server_address[1]}/page/0"

    def start(self) -> Site:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                site.log.append((time.time(), self.path))
                path = self.path.split("?", 1)[0]
                if path == "/robots.txt":
                    self._send(200, "text/plain", "User-agent: *\nDisallow: /private/\n")
                elif (
                    path.startswith("/page/") and path[6:].isdigit() and int(path[6:]) < site.pages
                ):
                    self._send(
                        200, "text/html; charset=utf-8", site_page(int(path[6:]), site.pages)
                    )
                else:
                    self._send(404, "text/html", "<h1>not found</h1>")

            def _send(self, status: int, content_type: str, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

        return Handler


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


# -- worker processes --------------------------------------------------------------------------


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


def environment_of(values: dict[str, Any]) -> dict[str, str]:
    """The same settings as the environment variables a child process reads."""
    from shared.config import environment_variables

    variables = environment_variables()
    env = {}
    for name, value in values.items():
        env[variables[name]] = (
            json.dumps(value)
            if isinstance(value, dict)
            else str(value).lower()
            if isinstance(value, bool)
            else str(value)
        )
    return env


_PROBLEM = re.compile(r"^\S+ \S+ (ERROR|CRITICAL) ")


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def problems(self) -> list[str]:
        """The ERROR and CRITICAL lines of its log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if _PROBLEM.match(line)]

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return env


def start_workers(
    config: ScenarioConfig, env: dict[str, str], log_dir: Path
) -> list[WorkerProcess]:
    """Spawn the worker processes: ``python -m testkit.kb_scenario worker --tier ...``."""
    child_env = _child_env({**env, HOST_RATE_ENV: config.host_rate})
    pool = [("slow", config.slow_threads)] * config.slow_processes + [
        ("fast", config.fast_threads)
    ] * config.fast_processes
    workers = []
    counts: Counter[str] = Counter()
    for tier, threads in pool:
        name = f"{tier}-{counts[tier]}"
        counts[tier] += 1
        log_path = log_dir / f"worker-{name}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "testkit.kb_scenario",
                    "worker",
                    "--tier",
                    tier,
                    "--threads",
                    str(threads),
                ],
                cwd=ROOT,
                env=child_env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        workers.append(WorkerProcess(name, process, log_path))
    return workers


def stop_workers(workers: Sequence[WorkerProcess], timeout: float = 20.0) -> None:
    """SIGTERM each worker this module started (they drain), then SIGKILL stragglers."""
    for worker in workers:
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for worker in workers:
        try:
            worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait(timeout=10)


def _scale_politeness(rate: str) -> None:
    """Make the crawler's per-host politeness rule ``rate`` in this process (before
    bootstrap: ``register`` looks ``HostPoliteness`` up when it builds the fetcher)."""
    from services.web import politeness
    from shared.config import parse_rate
    from tiers.policies import WindowRule

    rule = WindowRule(*parse_rate(rate, field=HOST_RATE_ENV))
    production = politeness.HostPoliteness

    class ScaledPoliteness(production):  # type: ignore[misc, valid-type]
        def __init__(self, windows: Any, rule: WindowRule = rule) -> None:
            super().__init__(windows, rule)

    politeness.HostPoliteness = ScaledPoliteness  # type: ignore[misc]


def _outcome_counter(client: Any, namespace: str) -> Any:
    """A middleware counting, per actor, how each delivered message ended, into the hash
    ``<ns>:e2e:outcomes`` (``<actor>|<outcome>`` -> count), and the runs each provider
    window admitted, into ``<ns>:e2e:window_runs`` (``<window key>#<index>`` -> runs, from
    the ``st_window`` the windows middleware puts on a run it admits)."""
    from dramatiq.middleware import Middleware

    from shared.errors import Delay
    from tiers.middleware.held import Held
    from tiers.options import WINDOW_ADMITTED

    key = f"{namespace}:e2e:outcomes"
    runs_key = f"{namespace}:e2e:window_runs"

    class OutcomeCounter(Middleware):
        def after_process_message(
            self, broker: Any, message: Any, *, result: Any = None, exception: Any = None
        ) -> None:
            if exception is None:
                outcome = "completed"
            elif isinstance(exception, Held):
                inner = exception.outcome
                reason = getattr(inner, "reason", None)
                outcome = f"held:{reason}" if reason else f"held:{type(inner).__name__}"
            elif isinstance(exception, Delay):
                outcome = f"delayed:{exception.reason}"
            else:
                outcome = f"raised:{type(exception).__name__}"
            client.hincrby(key, f"{message.actor_name}|{outcome}", 1)
            window = message.options.get(WINDOW_ADMITTED)
            if window and not isinstance(exception, Held):
                client.hincrby(runs_key, window, 1)

        def after_skip_message(self, broker: Any, message: Any) -> None:
            client.hincrby(key, f"{message.actor_name}|skipped", 1)

    return OutcomeCounter()


def worker_main(tier: str, threads: int) -> None:
    """A worker process of the scenario: the production platform from the environment
    (``bootstrap()``), the scaled crawl politeness, and the outcome counter."""
    rate = os.environ.get(HOST_RATE_ENV)
    if rate:
        _scale_politeness(rate)
    from services.app.bootstrap import bootstrap
    from tiers.worker import serve

    platform = bootstrap(component=f"worker-{tier}")
    settings = platform.settings
    platform.broker.add_middleware(
        _outcome_counter(platform.broker.client, settings.redis_namespace)
    )
    serve(
        platform.broker,
        platform.registry.queues_of_tier(tier),
        threads=threads,
        prefetch=settings.queue_prefetch,
        drain_seconds=settings.worker_drain_seconds,
        poll_ms=settings.worker_poll_ms,
    )
    platform.close()


# -- measuring ---------------------------------------------------------------------------------


class WindowSampler:
    """Polls every ``<ns>:window:*`` counter and keeps each key's highest value.

    A window's key lives two periods from its first start, so its final count stays
    readable for at least one period after its last start: polls closer together than a
    period see every window's final count. The sampler runs in a process of its own
    (``python -m testkit.kb_scenario sample``) so the fakes in the driver process cannot
    starve it; ``longest_gap`` says how well it kept up.
    """

    def __init__(self, client: Any, namespace: str) -> None:
        self.client = client
        self.prefix = f"{namespace}:window:"
        self.highest: dict[str, int] = {}
        self.polls = 0
        self.longest_gap = 0.0

    def run(self, stop: threading.Event, interval: float) -> None:
        last = time.monotonic()
        while not stop.wait(interval):
            self.poll()
            now = time.monotonic()
            self.longest_gap = max(self.longest_gap, now - last)
            last = now
        self.poll()

    def poll(self) -> None:
        keys = list(self.client.scan_iter(match=self.prefix + "*", count=1000))
        if keys:
            for key, value in zip(keys, self.client.mget(keys), strict=True):
                if value is not None:
                    name = key.decode()[len(self.prefix) :]
                    self.highest[name] = max(self.highest.get(name, 0), int(value))
        self.polls += 1

    def as_json(self) -> dict[str, Any]:
        return {"highest": self.highest, "polls": self.polls, "longest_gap": self.longest_gap}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WindowSampler:
        sampler = cls(None, "")
        sampler.highest = {k: int(v) for k, v in data["highest"].items()}
        sampler.polls = int(data["polls"])
        sampler.longest_gap = float(data["longest_gap"])
        return sampler

    def by_scope(self) -> dict[str, dict[int, int]]:
        """``<family>:<provider>:<scope>`` (or ``crawl-host:<host>``) -> window index ->
        starts admitted in that window."""
        scopes: dict[str, dict[int, int]] = defaultdict(dict)
        for name, count in self.highest.items():
            scope, _, index = name.rpartition(":")
            if index.isdigit():  # not a reservation cursor (``<scope>:next``)
                scopes[scope][int(index)] = count
        return dict(scopes)


def sampler_main(redis_url: str, namespace: str, out: str, interval: float) -> None:
    """The sampler process: poll until SIGTERM, then write what it saw to ``out``."""
    import redis

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _signum, _frame: stop.set())
    sampler = WindowSampler(redis.Redis.from_url(redis_url), namespace)
    sampler.poll()
    Path(out + ".ready").touch()
    sampler.run(stop, interval)
    Path(out).write_text(json.dumps(sampler.as_json()))


@dataclass
class SamplerProcess:
    process: subprocess.Popen[bytes]
    out: Path
    result: WindowSampler | None = None

    @classmethod
    def start(cls, redis_url: str, namespace: str, log_dir: Path) -> SamplerProcess:
        out = log_dir / f"{namespace}-windows.json"
        out.unlink(missing_ok=True)
        with open(log_dir / "window-sampler.log", "wb") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "testkit.kb_scenario",
                    "sample",
                    "--redis-url",
                    redis_url,
                    "--namespace",
                    namespace,
                    "--out",
                    str(out),
                ],
                cwd=ROOT,
                env=_child_env({}),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        sampler = cls(process, out)
        ready = Path(f"{out}.ready")
        deadline = time.monotonic() + 20
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                sampler.stop()
                raise RuntimeError("the window sampler did not start")
            time.sleep(0.05)
        ready.unlink()
        return sampler

    def stop(self) -> WindowSampler:
        """Stop it and read what it saw (once; later calls return the same)."""
        if self.result is not None:
            return self.result
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        if not self.out.exists():
            raise RuntimeError(f"the window sampler wrote nothing (exit {self.process.returncode})")
        data = json.loads(self.out.read_text())
        self.out.unlink()
        self.result = WindowSampler.from_json(data)
        return self.result


def aligned_counts(times: Sequence[float], period: float) -> Counter[int]:
    """Events per fixed window ``floor(t / period)`` (the window counters' alignment)."""
    return Counter(int(t * 1000) // max(1, int(period * 1000)) for t in times)


def sliding_max(times: Sequence[float], period: float) -> int:
    """The most events in any interval ``[t, t + period)``."""
    ordered = sorted(times)
    best, start = 0, 0
    for end, t in enumerate(ordered):
        while ordered[start] <= t - period:
            start += 1
        best = max(best, end - start + 1)
    return best


def job_records(client: Any, namespace: str) -> dict[str, dict[str, str]]:
    """Every job record of the namespace: job id -> {state, failures, last_error}."""
    prefix = f"{namespace}:job:"
    keys = list(client.scan_iter(match=prefix + "*", count=2000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hmget(key, "state", "failures", "last_error")
    records = {}
    for key, (state, failures, error) in zip(keys, pipe.execute(), strict=True):
        records[key.decode()[len(prefix) :]] = {
            "state": (state or b"").decode(),
            "failures": (failures or b"0").decode(),
            "last_error": (error or b"").decode(),
        }
    return records


_FAMILY_OF_ID = (
    ("kb-source-sync-", "kb_source_sync"),
    ("kb-document-sync-", "kb_document_sync"),
    ("kb-document-chunks-", "kb_document_chunks"),
    ("kb-crawl-start-", "kb_crawl_start"),
    ("kb-crawl-url-", "kb_crawl_url"),
)


def family_of(job_id: str) -> str:
    for prefix, family in _FAMILY_OF_ID:
        if job_id.startswith(prefix):
            return family
    return "other"


# -- database checks ---------------------------------------------------------------------------


def database_report(engine: Any, tenants: Sequence[Tenant]) -> dict[str, Any]:
    """Per organization: documents, chunk sets and search rows, crawl tasks and sources."""
    from sqlalchemy import text

    report: dict[str, Any] = {"organizations": {}}
    with engine.connect() as connection:

        def rows(sql: str, **params: Any) -> list[Any]:
            return list(connection.execute(text(sql), params))

        report["duplicate_chunk_positions"] = rows(
            "SELECT count(*) FROM (SELECT 1 FROM document_chunks"
            " GROUP BY source_type, source_id, position HAVING count(*) > 1) d"
        )[0][0]
        report["chunks_written"] = rows(
            "SELECT count(*) FROM document_chunks WHERE source_type = :t", t=CHUNK_SOURCE_TYPE
        )[0][0]
        for tenant in tenants:
            org = tenant.organization_id
            docs = rows(
                "SELECT d.id, d.knowledge_base_source_id, d.source_identifier, d.content_hash,"
                " d.content IS NOT NULL AND d.content <> '' AS has_content,"
                " d.chunks_synced_at IS NOT NULL AS chunked, d.last_synced_at IS NOT NULL"
                " FROM knowledge_base_documents d"
                " WHERE d.organization_id = :org AND d.discarded_at IS NULL",
                org=org,
            )
            chunk_sets = {
                r[0]: r[1:]
                for r in rows(
                    "SELECT source_id, count(*), count(DISTINCT content_hash), min(position),"
                    " max(position), min(content_hash) FROM document_chunks"
                    " WHERE organization_id = :org AND source_type = :t GROUP BY source_id",
                    org=org,
                    t=CHUNK_SOURCE_TYPE,
                )
            }
            search_rows = Counter(
                r[0]
                for r in rows(
                    "SELECT searchable_id FROM pg_search_documents"
                    " WHERE organization_id = :org AND searchable_type = :t",
                    org=org,
                    t=CHUNK_SOURCE_TYPE,
                )
            )
            by_source: dict[int, list[Any]] = defaultdict(list)
            for doc in docs:
                by_source[doc[1]].append(doc)
            doc_ids = {doc[0] for doc in docs}
            bad_chunk_sets = [
                doc[0]
                for doc in docs
                if doc[0] not in chunk_sets
                or chunk_sets[doc[0]][1] != 1  # one content hash: one chunk set
                or chunk_sets[doc[0]][2] != 0
                or chunk_sets[doc[0]][3] != chunk_sets[doc[0]][0] - 1  # positions 0..n-1
                or chunk_sets[doc[0]][4] != doc[3]  # of the document's current content
            ]
            tasks = rows(
                "SELECT status, urls_pending, urls_crawled, last_error"
                " FROM knowledge_base_crawl_tasks WHERE organization_id = :org",
                org=org,
            )
            ledger = rows(
                "SELECT count(*), count(*) FILTER (WHERE finished_at IS NULL)"
                " FROM api2.knowledge_base_crawl_task_urls WHERE organization_id = :org",
                org=org,
            )[0]
            sources = rows(
                "SELECT type, sync_status, last_sync_error FROM knowledge_base_sources"
                " WHERE organization_id = :org ORDER BY id",
                org=org,
            )

            report["organizations"][str(org)] = {
                "notion": _summary(by_source.get(tenant.notion_source_id, [])),
                "url": _summary(by_source.get(tenant.url_source_id, [])),
                "other_documents": len(docs)
                - len(by_source.get(tenant.notion_source_id, []))
                - len(by_source.get(tenant.url_source_id, [])),
                "chunk_sets": len(chunk_sets),
                "chunks": sum(v[0] for v in chunk_sets.values()),
                "chunk_sets_of_unknown_documents": len(set(chunk_sets) - doc_ids),
                "documents_with_bad_chunk_set": len(bad_chunk_sets),
                "search_rows": sum(search_rows.values()),
                "documents_without_one_search_row": sum(
                    1 for d in doc_ids if search_rows.get(d) != 1
                ),
                "search_rows_of_unknown_documents": len(set(search_rows) - doc_ids),
                "crawl_tasks": [
                    {"status": s, "urls_pending": p, "urls_crawled": c, "last_error": e}
                    for s, p, c, e in tasks
                ],
                "crawl_ledger": {"claimed": ledger[0], "unfinished": ledger[1]},
                "sources": [
                    {"type": t, "sync_status": s, "last_sync_error": e} for t, s, e in sources
                ],
            }
    return report


def _summary(group: Sequence[Any]) -> dict[str, int]:
    return {
        "documents": len(group),
        "distinct_identifiers": len({d[2] for d in group}),
        "with_content": sum(1 for d in group if d[4]),
        "chunked": sum(1 for d in group if d[5]),
    }


def progress(engine: Any) -> tuple[int, int]:
    """(live documents with chunks, live documents) across the database."""
    from sqlalchemy import text

    with engine.connect() as connection:
        chunked, total = connection.execute(
            text(
                "SELECT count(*) FILTER (WHERE chunks_synced_at IS NOT NULL), count(*)"
                " FROM knowledge_base_documents WHERE discarded_at IS NULL"
            )
        ).one()
    return int(chunked), int(total)


# -- the scenario ------------------------------------------------------------------------------


def _window_runs(client: Any, namespace: str) -> dict[str, dict[int, int]]:
    """``<family>:<provider>:<scope>`` -> window index -> runs that window admitted."""
    prefix = f"{namespace}:window:"
    runs: dict[str, dict[int, int]] = defaultdict(dict)
    for field_, count in client.hgetall(f"{namespace}:e2e:window_runs").items():
        name, _, index = field_.decode().removeprefix(prefix).rpartition("#")
        runs[name][int(index)] = int(count)
    return dict(runs)


def _windows_report(
    sampler: WindowSampler,
    window_runs: dict[str, dict[int, int]],
    platform: Any,
    overrides: dict[str, Any],
    host_rule: Any,
    tenants: Sequence[Tenant],
    notion_log: Sequence[tuple[float, str, str, str]],
    sites: Sequence[Site],
) -> list[dict[str, Any]]:
    """Per window scope: its rule; the starts its windows counted (sampled counters, which
    include reservations); the runs each window admitted (exact, from the runs); and what
    the provider saw (request timestamps) where the scenario can attribute them."""
    families = platform.registry.by_name()
    ods_org = {f"ods-{t.ods_id}": t for t in tenants}
    host_site = {site.host: site for site in sites}
    report = []
    for scope, windows in sorted(sampler.by_scope().items()):
        parts = scope.split(":")
        if parts[0] == "crawl-host":
            rule, family, provider, where = host_rule, "crawl-host", "url_crawl", parts[1]
        else:
            family, provider, where = parts[0], parts[1], ":".join(parts[2:])
            found = families.get(family)
            rule = found.window_for(None if provider == "*" else provider, overrides)
            if rule is None:
                continue
        entry: dict[str, Any] = {
            "family": family,
            "provider": provider,
            "scope": where,
            "limit": rule.limit,
            "period_seconds": rule.period_seconds,
            "windows": len(windows),
            "starts": sum(windows.values()),
            "max_starts_per_window": max(windows.values()),
            "full_windows": sum(1 for c in windows.values() if c >= rule.limit),
            # reservations counted in a window their job woke too late for
            "lapsed_reservations": sampler.highest.get(f"{scope}:lapsed", 0),
        }
        if scope in window_runs:
            runs = window_runs[scope]
            entry["admitted_runs"] = sum(runs.values())
            entry["max_admitted_runs_per_window"] = max(runs.values())
        times: list[float] | None = None
        if family == "kb_document_sync" and where in ods_org:
            token = ods_org[where].token
            times = [
                t
                for t, tok, method, path in notion_log
                if tok == token and method == "GET" and re.fullmatch(r"/v1/pages/[^/]+", path)
            ]
            entry["provider_requests_are"] = "Notion GET /v1/pages/{id} of this organization"
        elif family == "crawl-host" and where in host_site:
            pages = [(t, path) for t, path in host_site[where].log if path.startswith("/page/")]
            times = [t for t, _ in pages]
            entry["provider_requests_are"] = "GET /page/* on this host"
            # A page fetched more than once, with its seconds since the host's first request.
            fetched = collections.Counter(path for _, path in pages)
            entry["pages_fetched_again"] = {
                path: [round(t - pages[0][0], 3) for t, p in pages if p == path]
                for path, count in fetched.items()
                if count > 1
            }
        if times is not None:
            aligned = aligned_counts(times, rule.period_seconds)
            entry["provider_requests"] = len(times)
            entry["provider_max_per_aligned_window"] = max(aligned.values(), default=0)
            entry["provider_max_per_sliding_period"] = sliding_max(times, rule.period_seconds)
            span = (max(times) - min(times)) if len(times) > 1 else 0.0
            entry["provider_span_seconds"] = round(span, 3)
            entry["provider_mean_rate_per_second"] = round(len(times) / span, 2) if span else None
        report.append(entry)
    return report


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

        notion = _notion_server_class()(tokens)
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

        workers = start_workers(config, environment_of(values), log_dir)
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
        window_runs = _window_runs(client, namespace)
        database = database_report(engine, tenants)
        windows = _windows_report(
            sampler,
            window_runs,
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

    states: dict[str, Counter[str]] = defaultdict(Counter)
    failed, retried = [], []
    for job_id, record in records.items():
        states[family_of(job_id)][record["state"]] += 1
        if record["state"] == "failed":
            failed.append({"job": job_id, **record})
        elif record["failures"] != "0":
            retried.append({"job": job_id, **record})
    per_actor: dict[str, Counter[str]] = defaultdict(Counter)
    for key, count in outcomes.items():
        actor, _, outcome = key.partition("|")
        per_actor[actor][outcome] += count
    jobs = {
        family: {
            "records": dict(states.get(family, {})),
            "runs": sum(
                c
                for o, c in per_actor.get(family, {}).items()
                if not o.startswith("held:") and o != "skipped"
            ),
            "outcomes": dict(per_actor.get(family, {})),
        }
        for family in KB_FAMILIES
    }
    documents = sum(
        org[kind]["documents"]
        for org in database["organizations"].values()
        for kind in ("notion", "url")
    )
    delays = sum(
        c
        for counts in per_actor.values()
        for o, c in counts.items()
        if o.startswith(("held:", "delayed:"))
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
        "jobs_run": sum(j["runs"] for j in jobs.values()),
        "delays": delays,
        "failed_jobs": failed,
        "retried_jobs": retried,
        "jobs": jobs,
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


def window_families(windows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The windows report per family and provider: the rule, how many scopes, the most
    starts any one window admitted (counters), and the most requests a provider saw in one
    aligned window and in any sliding period (where attributed)."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for entry in windows:
        grouped[(entry["family"], entry["provider"])].append(entry)
    rows = []
    for (family, provider), entries in sorted(grouped.items()):
        observed = [e for e in entries if "provider_requests" in e]
        rows.append(
            {
                "family": family,
                "provider": provider,
                "limit": entries[0]["limit"],
                "period_seconds": entries[0]["period_seconds"],
                "scopes": len(entries),
                "starts": sum(e["starts"] for e in entries),
                "max_starts_per_window": max(e["max_starts_per_window"] for e in entries),
                "full_windows": sum(e["full_windows"] for e in entries),
                "admitted_runs": sum(e.get("admitted_runs", 0) for e in entries)
                if any("admitted_runs" in e for e in entries)
                else None,
                "max_admitted_runs_per_window": max(
                    (e["max_admitted_runs_per_window"] for e in entries if "admitted_runs" in e),
                    default=None,
                ),
                "provider_requests": sum(e["provider_requests"] for e in observed)
                if observed
                else None,
                "provider_max_per_aligned_window": max(
                    (e["provider_max_per_aligned_window"] for e in observed), default=None
                ),
                "provider_max_per_sliding_period": max(
                    (e["provider_max_per_sliding_period"] for e in observed), default=None
                ),
            }
        )
    return rows


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


# -- command line ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.kb_scenario")
    commands = parser.add_subparsers(dest="command", required=True)
    worker = commands.add_parser("worker", help="a worker process of the scenario")
    worker.add_argument("--tier", required=True, choices=("fast", "slow", "maintenance"))
    worker.add_argument("--threads", type=int, default=4)
    sample = commands.add_parser("sample", help="the window counter sampler")
    sample.add_argument("--redis-url", required=True)
    sample.add_argument("--namespace", required=True)
    sample.add_argument("--out", required=True)
    sample.add_argument("--interval", type=float, default=0.1)
    options = parser.parse_args(argv)
    if options.command == "worker":
        worker_main(options.tier, options.threads)
    else:
        sampler_main(options.redis_url, options.namespace, options.out, options.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
