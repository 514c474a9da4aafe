"""What ``bench.super_sources`` (and ``bench.connectors``) read to know where an import run
stands: node rows and documents, live jobs, the website's pages indexed, and each posted
webhook's node and when its index landed."""

from __future__ import annotations

from typing import Any

NODE_ROWS = "SELECT count(*) FROM api2.super_source_nodes"


def crawl_count(root: Any, settings: dict[str, Any]) -> int:
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


def website_indexed(client: Any, namespace: str) -> int:
    raw = client.hget(f"{namespace}:super:counters", "super.website.indexation")
    return int(raw or 0)


def imports_finished_after(
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


def webhook_job_times(client: Any, namespace: str) -> tuple[list[float], list[float]]:
    """Per webhook job: enqueue -> claimed by a worker, and claimed -> settled (seconds)."""
    waits, runs = [], []
    for key in client.scan_iter(match=f"{namespace}:job:super-webhook-*", count=2000):
        created, started, finished = client.hmget(key, "created_at", "started_at", "finished_at")
        if created and started and finished:
            waits.append((int(started) - int(created)) / 1000)
            runs.append((int(finished) - int(started)) / 1000)
    return waits, runs


def spread(values: list[float], percentile: Any) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "max": round(max(values), 3),
    }


def row_count(platform: Any, sql: str) -> int:
    from sqlalchemy import text

    with platform.engine.connect() as connection:
        return int(connection.execute(text(sql)).scalar_one())


def live_jobs(client: Any, namespace: str) -> int:
    from testkit.kb_report import job_records

    return sum(
        1
        for r in job_records(client, namespace).values()
        if r["state"] in ("waiting", "active", "delayed", "parked")
    )


def indexed_dates(platform: Any, posted: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """node id -> (synchronization date, indexed_at) as epoch seconds."""
    from sqlalchemy import text

    ids = [node_id(p) for p in posted]
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


def node_id(posted: dict[str, Any]) -> str:
    if posted["source"] == "github":
        return f"{posted['repo']}#{posted['number']}"
    return str(posted["issue"])


def edited(posted: dict[str, Any]) -> float:
    """The edit's time as the provider reports it (GitHub: whole seconds)."""
    return float(int(posted["updated"])) - 0.002


def webhooks_indexed(platform: Any, posted: list[dict[str, Any]]) -> int:
    dates = indexed_dates(platform, posted)
    return sum(1 for p in posted if node_id(p) in dates and dates[node_id(p)][0] >= edited(p))


def webhook_latencies(platform: Any, posted: list[dict[str, Any]]) -> list[float]:
    dates = indexed_dates(platform, posted)
    latencies = []
    for p in posted:
        found = dates.get(node_id(p))
        if found is not None and found[0] >= edited(p):
            latencies.append(max(0.0, found[1] - p["posted"]))
    return latencies
