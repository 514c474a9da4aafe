"""Import walks a root and indexes its nodes once, searchable per organization; unchanged
nodes are skipped; job ids follow the seed's unique keys."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import redis

from services.app.bootstrap import Platform
from services.connectors.nodes import NodeRef
from services.ingestion.search import search
from services.super_sources.families import import_request, index_request
from shared.db.engine import session_scope
from shared.db.models.super_sources import SuperSourceImport, SuperSourceNode
from tests import platform_harness as h
from tests.integration.services.super_sources import tracker
from tests.integration.services.super_sources.conftest import make_connection, workers

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _nodes(root: str, count: int, at: datetime = T0) -> dict[str, tuple[str, datetime]]:
    return {f"{root}/{n}": (f"body of {root} issue {n} zebracorn{n}", at) for n in range(count)}


def _counters(platform: Platform) -> dict[str, int]:
    raw = platform.broker.client.hgetall(f"{platform.settings.redis_namespace}:super:counters")
    return {k.decode(): int(v) for k, v in raw.items()}


def test_an_import_indexes_every_node_once_and_search_finds_it_per_organization(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    # Given two organizations with a 25-issue project each (pages of 10)
    orgs = [organization(), organization()]
    conns = [
        make_connection(super_platform, org, "gitlab", settings={"page_size": 10}) for org in orgs
    ]
    for org in orgs:
        tracker.put_nodes(redis_client, namespace, f"p{org}", _nodes(f"p{org}", 25))
    # When each project's import runs on real workers
    answers = super_platform.router.enqueue_many(
        [
            import_request(org, "gitlab", conn, NodeRef(tracker.ROOT_TYPE, f"p{org}"))
            for org, conn in zip(orgs, conns, strict=True)
        ]
    )
    assert {a.queue for a in answers} == {"super_import.fast"}
    with workers(super_platform):
        h.wait_until(lambda: _counters(super_platform).get("super.gitlab.indexation") == 50, 60)
        h.wait_until(
            lambda: all(h.state(super_platform.broker, a.job_id) == "completed" for a in answers)
        )
    # Then every node was indexed once, and each import's checkpoint says complete
    with session_scope(super_platform.sessions) as session:
        for org in orgs:
            assert session.query(SuperSourceNode).filter_by(organization_id=org).count() == 25
            state = session.query(SuperSourceImport).filter_by(organization_id=org).one()
            assert (state.checkpoint, state.pages, state.nodes_scheduled) == (None, 3, 25)
            assert state.completed_at is not None and state.watermark == "w"
        # and search finds a node's text in its own organization only
        from services.indexing.embedders import HashingEmbedder

        first, second = orgs
        hits = search(
            session,
            organization_id=first,
            knowledge_base_id=None,
            query=f"p{first} issue 7 zebracorn7",
            embedder=HashingEmbedder(),
        )
        assert hits and "zebracorn7" in hits[0].snippet
        assert not search(
            session,
            organization_id=second,
            knowledge_base_id=None,
            query=f"p{first} zebracorn7",
            embedder=HashingEmbedder(),
        ) or all(
            f"p{first}" not in hit.snippet
            for hit in search(
                session,
                organization_id=second,
                knowledge_base_id=None,
                query=f"p{first} zebracorn7",
                embedder=HashingEmbedder(),
            )
        )


def _prometheus(source: str, outcome: str) -> float:
    from prometheus_client import REGISTRY

    labels = {"source": source, "outcome": outcome}
    return REGISTRY.get_sample_value("speedtier_super_indexations_total", labels) or 0.0


def test_an_unchanged_node_is_skipped_and_a_newer_one_is_indexed_again(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    org = organization()
    conn = make_connection(super_platform, org, "acme")
    root = NodeRef(tracker.ROOT_TYPE, f"r{org}")
    tracker.put_nodes(redis_client, namespace, root.node_id, _nodes(root.node_id, 3))
    ref = NodeRef(tracker.NODE_TYPE, f"{root.node_id}/1")
    request = index_request(org, "acme", conn, root, ref)
    before = {
        outcome: _prometheus("acme", outcome) for outcome in ("indexation", "already_indexed")
    }
    with workers(super_platform):
        # Given a node indexed once
        first = super_platform.router.enqueue(request)
        assert first.queue == "super_index.slow"
        h.wait_until(lambda: h.state(super_platform.broker, first.job_id) == "completed")
        # When it is indexed again unchanged, then again after the provider changed it
        # (the same request has the same job id: the next one is accepted as a new job only
        # once this one has settled, not merely counted)
        again = super_platform.router.enqueue(request)
        h.wait_until(lambda: _counters(super_platform).get("super.acme.already_indexed") == 1)
        h.wait_until(lambda: h.state(super_platform.broker, again.job_id) == "completed")
        newer = {ref.node_id: ("new text", T0 + timedelta(days=1))}
        tracker.put_nodes(redis_client, namespace, root.node_id, newer)
        changed = super_platform.router.enqueue(request)
        assert changed.outcome == "replaced"  # a settled job of that id is replaced
        h.wait_until(lambda: _counters(super_platform).get("super.acme.indexation") == 2)
        h.wait_until(lambda: h.state(super_platform.broker, changed.job_id) == "completed")
        # and once more with a listed date not newer than indexed: no provider call at all
        fetches = int(redis_client.hget(f"{namespace}:tracker:fetches", ref.node_id) or 0)
        listed = index_request(org, "acme", conn, root, ref, listed_date=T0 + timedelta(days=1))
        super_platform.router.enqueue(listed)
        h.wait_until(lambda: _counters(super_platform).get("super.acme.already_indexed") == 2)
    assert int(redis_client.hget(f"{namespace}:tracker:fetches", ref.node_id) or 0) == fetches
    # the same counts as Prometheus counters (speedtier_super_indexations_total)
    assert _prometheus("acme", "indexation") - before["indexation"] == 2
    assert _prometheus("acme", "already_indexed") - before["already_indexed"] == 2
    with session_scope(super_platform.sessions) as session:
        row = session.query(SuperSourceNode).filter_by(organization_id=org).one()
        assert row.synchronization_date == T0 + timedelta(days=1)


def test_job_ids_follow_the_seeds_unique_keys(
    super_platform: Platform, organization: Callable[[], int]
) -> None:
    router = super_platform.router
    org = organization()
    root, other_root = NodeRef(tracker.ROOT_TYPE, "a"), NodeRef(tracker.ROOT_TYPE, "b")
    node = NodeRef(tracker.NODE_TYPE, "a/1")
    # import: unique by organization, connection and root node
    first = router.enqueue(import_request(org, "gitlab", 1, root))
    assert (
        router.enqueue(import_request(org, "gitlab", 1, root, first_run=True)).outcome
        == "deduplicated"
    )
    distinct = [
        router.enqueue(import_request(org + 1, "gitlab", 1, root)),
        router.enqueue(import_request(org, "gitlab", 2, root)),
        router.enqueue(import_request(org, "gitlab", 1, other_root)),
    ]
    assert all(answer.outcome == "added" for answer in distinct)
    assert first.job_id == f"super-import-{org}-1-{tracker.ROOT_TYPE}:a"
    # index: the same keys plus the node
    one = router.enqueue(index_request(org, "gitlab", 1, root, node))
    assert router.enqueue(index_request(org, "gitlab", 1, root, node)).outcome == "deduplicated"
    assert (
        router.enqueue(
            index_request(org, "gitlab", 1, root, NodeRef(tracker.NODE_TYPE, "a/2"))
        ).outcome
        == "added"
    )
    assert router.enqueue(index_request(org, "gitlab", 1, other_root, node)).outcome == "added"
    digest = "h" + hashlib.sha256(b"a/1").hexdigest()[:32]  # "/" is not kept in ids
    assert one.job_id == f"super-index-{org}-1-{tracker.ROOT_TYPE}:a-{tracker.NODE_TYPE}:{digest}"
    # ids with characters outside [A-Za-z0-9_.-] are digested, so they stay bounded
    odd = router.enqueue(index_request(org, "gitlab", 1, root, NodeRef("T", "x" * 2000)))
    assert len(odd.job_id) < 200


def test_a_complete_walk_hands_its_watermark_to_the_next_and_first_run_starts_over(
    super_platform: Platform,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    org = organization()
    conn = make_connection(super_platform, org, "acme", settings={"page_size": 2})
    root = NodeRef(tracker.ROOT_TYPE, f"m{org}")
    tracker.put_nodes(redis_client, namespace, root.node_id, _nodes(root.node_id, 3))
    walked_key, since_key = (f"{namespace}:tracker:{k}:{root.node_id}" for k in ("walked", "since"))

    def run(first_run: bool) -> list[tuple[str, str]]:
        start = redis_client.llen(walked_key)
        answer = super_platform.router.enqueue(
            import_request(org, "acme", conn, root, first_run=first_run)
        )
        h.wait_until(lambda: h.state(super_platform.broker, answer.job_id) == "completed")
        walked = [r.decode() for r in redis_client.lrange(walked_key, start, -1)]
        since = [r.decode() for r in redis_client.lrange(since_key, start, -1)]
        return list(zip(walked, since, strict=True))

    with workers(super_platform):
        # a first walk lists everything; the next one starts from its watermark
        assert run(first_run=False) == [("start", "-"), ("2", "-")]
        assert run(first_run=False) == [("start", "w"), ("2", "w")]
        # an unfinished walk is resumed, unless first_run asks to start over
        with session_scope(super_platform.sessions) as session:
            state = session.query(SuperSourceImport).filter_by(organization_id=org).one()
            state.checkpoint, state.since = "2", "w"
            session.commit()
        assert run(first_run=False) == [("2", "w")]
        with session_scope(super_platform.sessions) as session:
            state = session.query(SuperSourceImport).filter_by(organization_id=org).one()
            state.checkpoint, state.since = "2", "w"
            session.commit()
        assert run(first_run=True) == [("start", "-"), ("2", "-")]
