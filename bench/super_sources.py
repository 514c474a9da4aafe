"""Super sources end to end on real worker processes: imports and a webhook burst at once.

``python -m bench.super_sources`` builds, for each of ``--orgs`` organizations, a GitHub
repository of ``--github`` issues and pull requests (60/40) and a Linear team of ``--linear``
issues on the local protocol servers (``testkit/fakes``), a Git repository of ``--git``
text files (built with dulwich, cloned from disk) and, on the slow tier, a website of
``--website`` pages (``testkit.fakes.website``, each page answering after
``--website-page-seconds``, one site crawled by every organization). It starts fast-tier
and slow-tier worker processes (``python -m bench.super_sources worker --tier T``, the
production platform from the environment), enqueues every root's first import and, while
the imports run (the slow tier's website imports included), posts a burst of
``--webhooks`` signed deliveries (GitHub ``issues``/``pull_request``, Linear ``Issue``; each
one edits a distinct node first) over HTTP to ``POST /webhooks/<source>/events`` of the
API's app served by a threaded werkzeug server on 127.0.0.1. GitHub's fake enforces a
primary rate limit (``--github-limit`` calls per ``--github-window`` seconds for the whole
server, reported to each connection) so quota blocks happen; the registry's GitHub
``webhook_reserve`` keeps part of it for webhooks.

Reported: wall time, nodes per second, every node indexed once (node rows, documents and
the ``indexation`` counter against the node count), webhook-to-indexed p50/p95/max per
source (the post to the edited node's index commit), the website pages indexed when the
burst started and ended (the slow tier busy throughout), jobs failed and attempts spent
(both must be 0), jobs delayed by rate limits, provider calls, the load average.

Quick: ``python -m bench.super_sources --orgs 3 --github 100 --linear 50 --webhooks 50``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN, API_KEY, SECRET = "gh-bench-token", "lin-bench-key", "bench-webhook-secret"
NODE_ROWS = "SELECT count(*) FROM api2.super_source_nodes"


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.super_sources", description=__doc__)
    parser.add_argument("--orgs", type=int, default=3)
    parser.add_argument("--github", type=int, default=2000, help="issues + pulls per repo")
    parser.add_argument("--linear", type=int, default=1000, help="issues per team")
    parser.add_argument("--git", type=int, default=500, help="text files per Git repository")
    parser.add_argument("--website", type=int, default=500, help="pages of the slow-tier site")
    parser.add_argument("--website-page-seconds", type=float, default=0.25)
    parser.add_argument("--webhooks", type=int, default=1000)
    parser.add_argument("--burst-seconds", type=float, default=120.0)
    parser.add_argument("--github-limit", type=int, default=400)
    parser.add_argument("--github-window", type=float, default=10.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=12)
    parser.add_argument("--slow-processes", type=int, default=1)
    parser.add_argument("--slow-threads", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_REDIS_URL"))
    return parser.parse_args(argv)


def _values(redis_url: str, database_url: str, namespace: str) -> dict[str, Any]:
    from bench.common import BENCH_CREDENTIALS_KEY

    return {
        "environment": "test",
        "egress_allowed_networks": "127.0.0.1/32",  # the fakes listen on loopback
        "connector_credentials_key": BENCH_CREDENTIALS_KEY,
        "redis_url": redis_url,
        "database_url": database_url,
        "redis_namespace": namespace,
        "log_level": "WARNING",
        "http_timeout_seconds": 15.0,
        "worker_poll_ms": 50,
        "worker_drain_seconds": 5,
        "flag_cache_seconds": 5.0,
        "metrics_port": 0,
    }


def worker_main(tier: str, threads: int) -> None:
    """A worker process: the production platform from the environment, one tier's queues."""
    from services.app.bootstrap import bootstrap
    from tiers.worker import serve

    platform = bootstrap(component=f"worker-{tier}")
    serve(
        platform.broker,
        platform.registry.queues_of_tier(tier),
        threads=threads,
        poll_ms=50,
        drain_seconds=5,
    )


def _start_workers(
    env: dict[str, str], processes: int, threads: int, log_dir: Path, tier: str = "fast"
) -> list[tuple[subprocess.Popen[bytes], Any]]:
    child_env = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
    started = []
    for n in range(processes):
        log = (log_dir / f"worker-{tier}-{n}.log").open("wb")
        command = [sys.executable, "-m", "bench.super_sources", "worker", "--tier", tier]
        command += ["--threads", str(threads)]
        started.append(
            (subprocess.Popen(command, env=child_env, stdout=log, stderr=log, cwd=ROOT), log)
        )
    return started


def _stop_workers(workers: list[tuple[subprocess.Popen[bytes], Any]]) -> list[int]:
    for process, _log in workers:
        if process.poll() is None:
            process.terminate()
    codes = []
    for process, log in workers:
        try:
            codes.append(process.wait(timeout=30))
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append(process.wait(timeout=10))
        log.close()
    return codes


class Burst:
    """Posts signed webhooks for distinct nodes, each right after editing it in the fake, on
    a schedule (delivery i at ``i * seconds / n``) from a few sender threads, so a slow
    answer does not stretch the burst."""

    def __init__(
        self,
        api_url: str,
        github: Any,
        linear: Any,
        targets: list[dict[str, Any]],
        senders: int = 4,
    ):
        self.api_url, self.github, self.linear, self.targets = api_url, github, linear, targets
        self.senders = senders
        self.posted: list[dict[str, Any]] = []
        self.statuses: dict[int, int] = {}
        self.answer_seconds: list[float] = []
        self._lock = threading.Lock()
        self._local = threading.local()

    def run(self, seconds: float) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from testkit.fakes import github_server, linear_server

        gap = seconds / max(1, len(self.targets))
        start = time.time()
        with ThreadPoolExecutor(max_workers=self.senders) as pool:
            for n, target in enumerate(self.targets):
                time.sleep(max(0.0, start + n * gap - time.time()))
                if target["source"] == "github":
                    issue = self.github.touch(target["repo"], target["number"])
                    payload = github_server.issue_payload(
                        target["repo"], target["number"], pull=issue.is_pull
                    )
                    event = "pull_request" if issue.is_pull else "issues"
                    headers, body = github_server.signed_delivery(event, payload, SECRET)
                else:
                    issue = self.linear.touch(target["issue"])
                    data = {"id": issue.id, "teamId": issue.team_id}
                    headers, body = linear_server.signed_delivery("Issue", "update", data, SECRET)
                pool.submit(self._post, target, headers, body, issue.updated_at)

    def _post(self, target: dict[str, Any], headers: Any, body: bytes, updated: Any) -> None:
        import requests

        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        posted = time.time()
        try:
            status = session.post(
                f"{self.api_url}/webhooks/{target['source']}/events",
                params={"connection": target["connection"]},
                data=body,
                headers=headers,
                timeout=30,
            ).status_code
        except requests.RequestException:
            status = 0  # reported under answers as 0: no answer
        with self._lock:
            self.answer_seconds.append(time.time() - posted)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if status == 202:
                self.posted.append({**target, "posted": posted, "updated": updated})


def run(options: argparse.Namespace) -> dict[str, Any]:
    from bench.common import REDIS_URL, connect, delete_namespace, new_namespace, percentile
    from services.app.api import create_app
    from services.app.bootstrap import bootstrap
    from services.connectors.nodes import NodeRef
    from services.super_sources import store
    from services.super_sources.families import import_request
    from shared.config import load_settings
    from shared.credentials import CredentialBox
    from shared.db.engine import session_scope
    from testkit.fakes import git_repository
    from testkit.fakes.github_server import GithubServer
    from testkit.fakes.linear_server import LinearServer
    from testkit.fakes.website import FakeWebsite
    from testkit.kb_report import job_records
    from testkit.kb_workers import environment_of
    from testkit.scenario_database import create_database, drop_database, server_database_url

    redis_url = options.redis_url or REDIS_URL
    client = connect(redis_url, "super-bench")
    namespace = new_namespace("super")
    server_url = server_database_url()
    database_url = create_database(server_url)
    log_dir = Path(tempfile.mkdtemp(prefix="bench-super-"))
    github = GithubServer(TOKEN, rate_limit=options.github_limit, rate_window=options.github_window)
    linear = LinearServer(API_KEY)
    site = FakeWebsite(pages=max(1, options.website))
    site_settings = {
        "urls": [],
        "max_pages": options.website,
        "max_depth": 64,
        "allow_private_networks": True,  # the fake site is on 127.0.0.1
    }
    workers: list[tuple[subprocess.Popen[bytes], Any]] = []
    platform = api = None
    loads = LoadSampler()
    try:
        with github as github_url, linear as linear_url, site:
            site_root = NodeRef("WebsiteRoot", site.url("/page/0"))
            site_pages = _crawl_count(site_root, site_settings) if options.website else 0
            site.page_seconds = options.website_page_seconds
            values = _values(redis_url, database_url, namespace)
            box = CredentialBox.from_setting(values["connector_credentials_key"])
            platform = bootstrap(load_settings(**values), component="bench")
            api = ApiThread(create_app(platform))
            roots, targets = [], []
            for n in range(options.orgs):
                org = 7000 + n
                repo = f"org{n}/big"
                github.populate(
                    repo,
                    issues=options.github * 3 // 5,
                    pulls=options.github - options.github * 3 // 5,
                )
                team = linear.populate(f"T{n}", issues=options.linear)
                with session_scope(platform.sessions) as session:
                    gh = store.create_connection(
                        session,
                        org,
                        "github",
                        box=box,
                        credentials={"token": TOKEN},
                        base_url=github_url,
                        webhook_secret=SECRET,
                    )
                    ln = store.create_connection(
                        session,
                        org,
                        "linear",
                        box=box,
                        credentials={"api_key": API_KEY},
                        base_url=linear_url,
                        webhook_secret=SECRET,
                    )
                    session.commit()
                    gh_id, ln_id = gh.id, ln.id
                roots.append(
                    import_request(
                        org, "github", gh_id, NodeRef("GithubRepo", repo), first_run=True
                    )
                )
                roots.append(
                    import_request(
                        org, "linear", ln_id, NodeRef("LinearTeam", team.id), first_run=True
                    )
                )
                if options.git:
                    origin = git_repository.init(log_dir / f"org{n}.git")
                    git_repository.populate(origin, files=options.git)
                    with session_scope(platform.sessions) as session:
                        git = store.create_connection(
                            session,
                            org,
                            "git",
                            box=box,
                            settings={"cache_dir": str(log_dir / "cache")},
                        )
                        session.commit()
                        git_id = git.id
                    roots.append(
                        import_request(
                            org,
                            "git",
                            git_id,
                            NodeRef("GitRepository", str(origin)),
                            first_run=True,
                        )
                    )
                if options.website:
                    with session_scope(platform.sessions) as session:
                        web = store.create_connection(
                            session, org, "website", box=box, settings=site_settings
                        )
                        session.commit()
                        web_id = web.id
                    roots.append(import_request(org, "website", web_id, site_root, first_run=True))
                targets += [
                    {"source": "github", "org": org, "connection": gh_id, "repo": repo, "number": k}
                    for k in range(1, options.github + 1)
                ]
                targets += [
                    {"source": "linear", "org": org, "connection": ln_id, "issue": i.id}
                    for i in linear.issues.values()
                    if i.team_id == team.id
                ]
            random.Random(13).shuffle(targets)
            burst = Burst(api.url, github, linear, targets[: options.webhooks])
            expected = options.orgs * (options.github + options.linear + options.git + site_pages)

            workers = _start_workers(
                environment_of(values), options.processes, options.threads, log_dir
            )
            if options.website:
                workers += _start_workers(
                    environment_of(values),
                    options.slow_processes,
                    options.slow_threads,
                    log_dir,
                    tier="slow",
                )
            loads.start()
            started = time.time()
            answers = platform.router.enqueue_many(roots)
            # the burst starts once the workers run the imports (not while they boot)
            while time.time() < started + 120 and not any(
                (platform.broker.jobs.record(a.job_id) or {}).get("state")
                in ("active", "completed")
                for a in answers
            ):
                time.sleep(0.2)
            time.sleep(2.0)
            sender = threading.Thread(target=burst.run, args=(options.burst_seconds,), daemon=True)
            website_at_start = _website_indexed(client, namespace)
            burst_started = time.time() - started
            sender.start()
            sender.join()
            website_at_end = _website_indexed(client, namespace)
            burst_ended = time.time() - started
            import_ids = [a.job_id for a in answers]
            deadline = started + options.timeout
            while time.time() < deadline:
                done = all(
                    (platform.broker.jobs.record(j) or {}).get("state") == "completed"
                    for j in import_ids
                )
                if (
                    done
                    and _count(platform, NODE_ROWS) >= expected
                    and _webhooks_indexed(platform, burst.posted) == len(burst.posted)
                    and _live_jobs(client, namespace) == 0
                ):
                    break
                time.sleep(1.0)
            wall = time.time() - started
            stalled = time.time() >= deadline
            latencies = _webhook_latencies(platform, burst.posted)
            by_source = {
                source: _spread(
                    _webhook_latencies(
                        platform, [p for p in burst.posted if p["source"] == source]
                    ),
                    percentile,
                )
                for source in ("github", "linear")
            }
            website_finished = _imports_finished_after(client, namespace, "WebsiteRoot", started)
            records = job_records(client, namespace)
            counters = {
                (k.decode() if isinstance(k, bytes) else k): int(v)
                for k, v in client.hgetall(f"{namespace}:super:counters").items()
            }
            delays = sum(
                1
                for key in client.scan_iter(match=f"{namespace}:job:*", count=2000)
                if b"rate-limit" in (client.hget(key, "last_delay") or b"")
                or b"github" in (client.hget(key, "last_delay") or b"")
            )
            waits, runs = _webhook_job_times(client, namespace)
            result = {
                "organizations": options.orgs,
                "nodes_expected": expected,
                "node_rows": _count(platform, NODE_ROWS),
                "documents": _count(
                    platform, "SELECT count(*) FROM api2.kb_documents WHERE deleted_at IS NULL"
                ),
                "chunks": _count(platform, "SELECT count(*) FROM api2.kb_chunks"),
                "counters": counters,
                "wall_seconds": round(wall, 1),
                "nodes_per_second": round(expected / wall, 1),
                "webhooks_posted": len(burst.posted),
                "webhook_answers": burst.statuses,
                "webhook_answer_seconds": _spread(burst.answer_seconds, percentile),
                "webhook_to_indexed_seconds": {
                    "p50": round(percentile(latencies, 50), 3) if latencies else None,
                    "p95": round(percentile(latencies, 95), 3) if latencies else None,
                    "max": round(max(latencies), 3) if latencies else None,
                    "measured": len(latencies),
                },
                "webhook_to_indexed_by_source": by_source,
                "burst_seconds_after_start": [round(burst_started, 1), round(burst_ended, 1)],
                "website_pages_expected": options.orgs * site_pages,
                "website_indexed_at_burst_start_end": [website_at_start, website_at_end],
                "website_imports_finished_after_seconds": website_finished,
                "webhook_job_claimed_after_seconds": _spread(waits, percentile),
                "webhook_job_claimed_to_settled_seconds": _spread(runs, percentile),
                "jobs": len(records),
                "jobs_failed": sum(1 for r in records.values() if r["state"] == "failed"),
                "attempts_spent": sum(int(r["failures"] or 0) for r in records.values()),
                "jobs_delayed_by_rate_limits": delays,
                "github_requests": len(github.requests),
                "linear_requests": len(linear.requests),
                "website_requests": len(site.requests),
                "stalled": stalled,
                "load_average": loads.summary(),
                "log_dir": str(log_dir),
            }
    finally:
        loads.stop()
        codes = _stop_workers(workers)
        if api is not None:
            api.stop()
        if platform is not None:
            platform.close()
        drop_database(server_url, database_url)
        delete_namespace(client, namespace)
    result["worker_exit_codes"] = codes
    return result


class ApiThread:
    """The API's Flask app behind a threaded werkzeug server on 127.0.0.1 (real HTTP)."""

    def __init__(self, app: Any) -> None:
        from werkzeug.serving import make_server

        self._server = make_server("127.0.0.1", 0, app, threaded=True)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class LoadSampler:
    """The 1-minute load average every 5 s while the run goes."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(5.0)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def summary(self) -> dict[str, float | None]:
        if not self.samples:
            return {"min": None, "mean": None, "max": None}
        return {
            "min": round(min(self.samples), 1),
            "mean": round(sum(self.samples) / len(self.samples), 1),
            "max": round(max(self.samples), 1),
        }


def _crawl_count(root: Any, settings: dict[str, Any]) -> int:
    """How many pages a website import of ``root`` lists (the site is deterministic)."""
    from bench.common import allow_loopback_providers
    from services.connectors import website
    from services.connectors.nodes import Connection

    allow_loopback_providers()  # the walk runs in this process; the site is a local fake
    conn = Connection("website", 0, 0, "", {}, settings, timeout=15.0)
    checkpoint: str | None = None
    found: set[str] = set()
    while True:
        page = website.SOURCE.walk(conn, root, checkpoint)
        found.update(ref.node_id for ref in page.refs)
        if page.checkpoint is None:
            return len(found)
        checkpoint = page.checkpoint


def _website_indexed(client: Any, namespace: str) -> int:
    raw = client.hget(f"{namespace}:super:counters", "super.website.indexation")
    return int(raw or 0)


def _imports_finished_after(
    client: Any, namespace: str, root_type: str, started: float
) -> list[float]:
    """Seconds from the run's start to each import of a ``root_type`` root finishing."""
    done = []
    pattern = f"{namespace}:job:super-import-*-{root_type}:*"
    for key in client.scan_iter(match=pattern, count=2000):
        finished = client.hget(key, "finished_at")
        if finished:
            done.append(round(int(finished) / 1000 - started, 1))
    return sorted(done)


def _webhook_job_times(client: Any, namespace: str) -> tuple[list[float], list[float]]:
    """Per webhook job: enqueue -> claimed by a worker, and claimed -> settled (seconds)."""
    waits, runs = [], []
    for key in client.scan_iter(match=f"{namespace}:job:super-webhook-*", count=2000):
        created, started, finished = client.hmget(key, "created_at", "started_at", "finished_at")
        if created and started and finished:
            waits.append((int(started) - int(created)) / 1000)
            runs.append((int(finished) - int(started)) / 1000)
    return waits, runs


def _spread(values: list[float], percentile: Any) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "max": round(max(values), 3),
    }


def _count(platform: Any, sql: str) -> int:
    from sqlalchemy import text

    with platform.engine.connect() as connection:
        return int(connection.execute(text(sql)).scalar_one())


def _live_jobs(client: Any, namespace: str) -> int:
    from testkit.kb_report import job_records

    return sum(
        1
        for r in job_records(client, namespace).values()
        if r["state"] in ("waiting", "active", "delayed", "parked")
    )


def _indexed_dates(platform: Any, posted: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """node id -> (synchronization date, indexed_at) as epoch seconds."""
    from sqlalchemy import text

    ids = [_node_id(p) for p in posted]
    with platform.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT node_id, extract(epoch FROM synchronization_date), "
                "extract(epoch FROM indexed_at) FROM api2.super_source_nodes "
                "WHERE node_id = ANY(:ids)"
            ),
            {"ids": ids},
        ).all()
    return {row[0]: (float(row[1]), float(row[2])) for row in rows}


def _node_id(posted: dict[str, Any]) -> str:
    if posted["source"] == "github":
        return f"{posted['repo']}#{posted['number']}"
    return str(posted["issue"])


def _edited(posted: dict[str, Any]) -> float:
    """The edit's time as the provider reports it (GitHub: whole seconds)."""
    return float(int(posted["updated"])) - 0.002


def _webhooks_indexed(platform: Any, posted: list[dict[str, Any]]) -> int:
    dates = _indexed_dates(platform, posted)
    return sum(1 for p in posted if _node_id(p) in dates and dates[_node_id(p)][0] >= _edited(p))


def _webhook_latencies(platform: Any, posted: list[dict[str, Any]]) -> list[float]:
    dates = _indexed_dates(platform, posted)
    latencies = []
    for p in posted:
        found = dates.get(_node_id(p))
        if found is not None and found[0] >= _edited(p):
            latencies.append(max(0.0, found[1] - p["posted"]))
    return latencies


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        parser = argparse.ArgumentParser()
        parser.add_argument("--tier", default="fast")
        parser.add_argument("--threads", type=int, default=12)
        args = parser.parse_args(argv[1:])
        worker_main(args.tier, args.threads)
        return 0
    result = run(_options(argv))
    print(json.dumps(result, indent=2))
    ok = (
        not result["stalled"]
        and result["jobs_failed"] == 0
        and result["attempts_spent"] == 0
        and result["node_rows"] == result["nodes_expected"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
