"""A test super source kept in Redis, so worker processes and the test share its state.

The tracker stands in for a provider's API in the platform tests (families, caps, checkpoints,
rate limits, webhooks); each provider's own protocol is tested against its fake server with
its SDK in ``tests/integration/services/connectors``. It is registered twice: as ``gitlab``
(a fast-tier name in the tier table) and as ``acme`` (a name the tier table does not know,
so slow), through :func:`register`, a service module for ``bootstrap(services=[...])``.

Redis keys (``<ns>:tracker:...``): ``nodes:<root>`` (node id -> JSON title/text/updated),
``fetches`` (node -> count), ``walked`` (list of checkpoints asked for), ``active:<scope>``
/ ``max:<scope>`` (concurrency seen per source and organization, and per source for
webhooks), ``retry_after`` (the next fetch answers 429 with that Retry-After),
``exhaust`` (the next fetch reports its quota spent for that many seconds), ``fail:<node>``
(that many 5xx before the node answers), ``refused:<root>`` (with the connection setting
``walk_retry_after``, each walk page answers 429 once).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from services.connectors.nodes import (
    Connection,
    MalformedWebhook,
    Node,
    NodeRef,
    WalkPage,
    WebhookEvent,
    header,
)
from services.super_sources.registry import (
    SourceEntry,
    SourceRegistry,
    WebhookSpec,
    WebhookWork,
    index_touched,
)
from shared.errors import Delay, Retryable

ROOT_TYPE = "TrackerProject"
NODE_TYPE = "TrackerIssue"
_STATE: dict[str, Any] = {}

_ENTER = """
local active = redis.call('INCR', KEYS[1])
local top = tonumber(redis.call('GET', KEYS[2]) or '0')
if active > top then redis.call('SET', KEYS[2], active) end
return active
"""


def _client() -> redis.Redis:
    return _STATE["client"]  # type: ignore[no-any-return]


def key(*parts: str) -> str:
    return ":".join((_STATE["ns"], "tracker", *parts))


def configure(client: redis.Redis, namespace: str) -> None:
    _STATE["client"] = client
    _STATE["ns"] = namespace


@contextmanager
def _active(scope: str) -> Iterator[None]:
    client = _client()
    client.eval(_ENTER, 2, key("active", scope), key("max", scope))
    try:
        yield
    finally:
        client.decr(key("active", scope))


def max_active(client: redis.Redis, namespace: str, scope: str) -> int:
    return int(client.get(f"{namespace}:tracker:max:{scope}") or 0)


def put_nodes(
    client: redis.Redis, namespace: str, root: str, nodes: Mapping[str, tuple[str, datetime]]
) -> None:
    """Set nodes of ``root``: id -> (text, updated)."""
    client.hset(
        f"{namespace}:tracker:nodes:{root}",
        mapping={
            node_id: json.dumps(
                {"title": f"Issue {node_id}", "text": text, "updated": at.isoformat()}
            )
            for node_id, (text, at) in nodes.items()
        },
    )


class Tracker:
    """The NodeSource. Node ids are ``<root>/<n>``; a walk pages through them in order."""

    root_node_types = (ROOT_TYPE,)
    indexable_node_types = (NODE_TYPE,)

    def __init__(self, source: str) -> None:
        self.source = source

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        prefix = key("nodes", "")
        return [
            NodeRef(ROOT_TYPE, raw.decode()[len(prefix) :])
            for raw in _client().scan_iter(match=f"{prefix}*")
        ]

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        client = _client()
        client.rpush(key("walked", root.node_id), checkpoint or "start")
        client.rpush(key("since", root.node_id), since or "-")
        retry_after = conn.settings.get("walk_retry_after")
        if retry_after and client.sadd(key("refused", root.node_id), checkpoint or "start"):
            raise Delay.after(float(retry_after), reason="retry-after")  # once per page
        with _active(f"import:{self.source}:{conn.organization_id}"):
            time.sleep(float(conn.settings.get("page_sleep", 0)))
        size = int(conn.settings.get("page_size", 10))
        ids = sorted(
            (raw.decode() for raw in client.hkeys(key("nodes", root.node_id))),
            key=lambda n: int(n.rsplit("/", 1)[1]),
        )
        start = int(checkpoint or 0)
        refs = [NodeRef(NODE_TYPE, node_id) for node_id in ids[start : start + size]]
        end = start + size
        return WalkPage(refs, str(end) if end < len(ids) else None, watermark="w")

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        client = _client()
        client.hincrby(key("fetches"), ref.node_id, 1)
        retry_after = client.getdel(key("retry_after"))
        if retry_after is not None:
            raise Delay.after(float(retry_after), reason="retry-after")
        if client.decr(key("fail", ref.node_id)) >= 0:
            raise Retryable(f"tracker said 503 for {ref.node_id}")
        exhaust = client.getdel(key("exhaust"))
        if exhaust is not None:
            conn.record_quota(0, datetime.now(UTC) + timedelta(seconds=float(exhaust)))
        with _active(f"{self.source}:{conn.organization_id}"):
            time.sleep(float(conn.settings.get("fetch_sleep", 0)))
        root = ref.node_id.rsplit("/", 1)[0]
        raw = client.hget(key("nodes", root), ref.node_id)
        if raw is None:
            return None
        data = json.loads(raw)
        return Node(
            ref=ref,
            title=data["title"],
            text=data["text"],
            url=f"https://tracker.test/{ref.node_id}",
            synchronization_date=datetime.fromisoformat(data["updated"]),
        )


def sign(secret: str, body: bytes, timestamp: int) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def verify(headers: Mapping[str, str], body: bytes, secret: str, now: datetime) -> bool:
    """``X-Tracker-Signature``: HMAC-SHA256 of ``<timestamp>.<body>``, within 60 s."""
    signature, stamp = (
        header(headers, "X-Tracker-Signature"),
        header(headers, "X-Tracker-Timestamp"),
    )
    if not signature or not stamp or not stamp.isdigit():
        return False
    if abs(now.timestamp() - int(stamp)) > 60:
        return False
    return hmac.compare_digest(signature, sign(secret, body, int(stamp)))


def parse(headers: Mapping[str, str], body: bytes) -> WebhookEvent:
    try:
        data = json.loads(body)
        return WebhookEvent(
            delivery_id=str(data["delivery"]),
            refs=[NodeRef(NODE_TYPE, node_id) for node_id in data.get("nodes", [])],
            root=NodeRef(ROOT_TYPE, data["root"]) if data.get("root") else None,
            kind="issue",
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise MalformedWebhook(f"unreadable tracker webhook: {exc}") from None


def slow_processor(conn: Connection, event: WebhookEvent) -> WebhookWork:
    """A processor that takes time (it would call the provider), to see the webhook caps."""
    with _active(f"webhook:{conn.source}"):
        time.sleep(float(conn.settings.get("webhook_sleep", 0)))
    return index_touched(conn, event)


#: Calls each tracker connection keeps back for webhook work.
WEBHOOK_RESERVE = 5


def entry(source: str) -> SourceEntry:
    return SourceEntry(
        connector=Tracker(source),
        default_base_url="https://tracker.test",
        webhook_reserve=WEBHOOK_RESERVE,
        webhooks=(
            WebhookSpec("events", "X-Tracker-Signature: HMAC-SHA256", verify, parse),
            WebhookSpec("slow", "X-Tracker-Signature: HMAC-SHA256", verify, parse, slow_processor),
        ),
    )


def tracker_registry() -> SourceRegistry:
    return SourceRegistry.of([entry("gitlab"), entry("acme")])


def register(platform: Any) -> None:
    """Service module: the super sources over the tracker registry."""
    from services.super_sources import install

    configure(redis.Redis.from_url(platform.settings.redis_url), platform.settings.redis_namespace)
    install(platform, tracker_registry())


def worker_main(values: dict[str, Any], threads: int) -> None:
    """A real worker process over the fast and slow queues of the tracker platform (for
    ``multiprocessing``'s spawn: it imports this module and builds its own platform)."""
    from services.app.bootstrap import bootstrap
    from shared.config import load_settings
    from tiers.worker import serve

    platform = bootstrap(
        load_settings(**values),
        services=["tests.integration.services.super_sources.tracker"],
        component="worker-test",
    )
    queues = platform.registry.queues_of_tier("fast") + platform.registry.queues_of_tier("slow")
    serve(platform.broker, queues, threads=threads, poll_ms=50, drain_seconds=5)
