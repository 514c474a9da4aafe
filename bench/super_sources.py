"""Super sources end to end on real worker processes: imports and a webhook burst at once.

``python -m bench.super_sources`` builds, for each of ``--orgs`` organizations, a GitHub
repository of ``--github`` issues and pull requests (60/40) and a Linear team of ``--linear``
issues on the local protocol servers (``testkit/fakes``), a Git repository of ``--git``
text files (built with dulwich, cloned from disk) and, on the slow tier, a website of
``--website`` pages (``testkit.fakes.website``, each page answering after
``--website-page-seconds``, one site crawled by every organization). It starts fast-tier
and slow-tier worker processes (``python -m bench.platform_workers --tier T``, the
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

TOKEN, API_KEY, SECRET = "gh-bench-token", "lin-bench-key", "bench-webhook-secret"


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
    from bench.platform_workers import (
        ApiThread,
        LoadSampler,
        settings_values,
        start_workers,
        stop_workers,
    )
    from bench.super_sources_checks import (
        NODE_ROWS,
        crawl_count,
        imports_finished_after,
        live_jobs,
        row_count,
        spread,
        webhook_job_times,
        webhook_latencies,
        webhooks_indexed,
        website_indexed,
    )
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
            site_pages = crawl_count(site_root, site_settings) if options.website else 0
            site.page_seconds = options.website_page_seconds
            values = settings_values(redis_url, database_url, namespace)
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

            workers = start_workers(
                environment_of(values), options.processes, options.threads, log_dir
            )
            if options.website:
                workers += start_workers(
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
            website_at_start = website_indexed(client, namespace)
            burst_started = time.time() - started
            sender.start()
            sender.join()
            website_at_end = website_indexed(client, namespace)
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
                    and row_count(platform, NODE_ROWS) >= expected
                    and webhooks_indexed(platform, burst.posted) == len(burst.posted)
                    and live_jobs(client, namespace) == 0
                ):
                    break
                time.sleep(1.0)
            wall = time.time() - started
            stalled = time.time() >= deadline
            latencies = webhook_latencies(platform, burst.posted)
            by_source = {
                source: spread(
                    webhook_latencies(platform, [p for p in burst.posted if p["source"] == source]),
                    percentile,
                )
                for source in ("github", "linear")
            }
            website_finished = imports_finished_after(client, namespace, "WebsiteRoot", started)
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
            waits, runs = webhook_job_times(client, namespace)
            result = {
                "organizations": options.orgs,
                "nodes_expected": expected,
                "node_rows": row_count(platform, NODE_ROWS),
                "documents": row_count(
                    platform, "SELECT count(*) FROM api2.kb_documents WHERE deleted_at IS NULL"
                ),
                "chunks": row_count(platform, "SELECT count(*) FROM api2.kb_chunks"),
                "counters": counters,
                "wall_seconds": round(wall, 1),
                "nodes_per_second": round(expected / wall, 1),
                "webhooks_posted": len(burst.posted),
                "webhook_answers": burst.statuses,
                "webhook_answer_seconds": spread(burst.answer_seconds, percentile),
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
                "webhook_job_claimed_after_seconds": spread(waits, percentile),
                "webhook_job_claimed_to_settled_seconds": spread(runs, percentile),
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
        codes = stop_workers(workers)
        if api is not None:
            api.stop()
        if platform is not None:
            platform.close()
        drop_database(server_url, database_url)
        delete_namespace(client, namespace)
    result["worker_exit_codes"] = codes
    return result


def main(argv: list[str] | None = None) -> int:
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
