"""What the knowledge-sync scenario measured (``testkit.kb_scenario``): the namespace's job
records, the database's documents, chunk sets and search rows per organization, and each
provider window's counts beside what the providers saw."""

from __future__ import annotations

import collections
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from testkit.window_sampler import WindowSampler, aligned_counts, sliding_max

if TYPE_CHECKING:
    from testkit.kb_fakes import Site
    from testkit.kb_scenario import Tenant

CHUNK_SOURCE_TYPE = "KnowledgeBaseDocument"
KB_FAMILIES = (
    "kb_source_sync",
    "kb_document_sync",
    "kb_document_chunks",
    "kb_crawl_start",
    "kb_crawl_url",
)


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


def window_runs(client: Any, namespace: str) -> dict[str, dict[int, int]]:
    """``<family>:<provider>:<scope>`` -> window index -> runs that window admitted."""
    prefix = f"{namespace}:window:"
    runs: dict[str, dict[int, int]] = defaultdict(dict)
    for field_, count in client.hgetall(f"{namespace}:e2e:window_runs").items():
        name, _, index = field_.decode().removeprefix(prefix).rpartition("#")
        runs[name][int(index)] = int(count)
    return dict(runs)


def windows_report(
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


def jobs_report(records: dict[str, dict[str, str]], outcomes: dict[str, int]) -> dict[str, Any]:
    """Per knowledge-sync family: its records' states, its runs and their outcomes (from the
    scenario's outcome counter, ``<actor>|<outcome>`` -> count); the failed jobs, the jobs
    that failed a run and then settled otherwise, and the runs held or delayed."""
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
    delays = sum(
        c
        for counts in per_actor.values()
        for o, c in counts.items()
        if o.startswith(("held:", "delayed:"))
    )
    return {"jobs": jobs, "failed": failed, "retried": retried, "delays": delays}
