"""Webhooks: the public receipt (verify, refuse replays, enqueue) and the webhook unit.

Receipt, ``POST /webhooks/<source>/<path>[?connection=<id>]``:

==========================================  ================================================
the delivery                                answer
==========================================  ================================================
unknown source or path                      404 (logged), nothing enqueued
no ``?connection=`` and no connection whose  404
``webhook_key`` is the payload's root
a connection without a webhook secret       404
a signature that does not verify (or a      401, nothing enqueued
stale Linear timestamp)
a body the connector cannot read            400
a delivery id already received (7 days)     200 ``duplicate``, nothing enqueued
accepted                                    202 ``accepted``, one ``super_webhook`` job on
                                            the source's tier
Redis refuses the job                       503 with Retry-After, and the delivery id is
                                            released so the provider's retry is accepted
==========================================  ================================================

The signature is the authentication: the connector compares it in constant time
(``hmac.compare_digest``). Without ``?connection=`` the payload is read before it is
verified, only to find the connection whose secret verifies it. The replay guard is one
``SET NX`` with a TTL on ``<ns>:super:delivery:<source>:<connection>:<delivery id>``; the
delivery id is what the provider keeps across the retries of one event and nothing else
(GitLab: ``Idempotency-Key``; its ``X-Gitlab-Event-UUID``, shared by recursive webhooks,
is only the chain id the accepted delivery's log line names).

The webhook unit runs the entry's processor (it may call the provider) and schedules one
``super_index`` job per node it names, as seed 004's ``scheduleNodeIndexations`` does: the
nodes are indexed under the index family's cap (5 fast, 2 slow per organization), never by
the webhook job itself. The jobs carry ``webhook`` so they may spend the quota the source
keeps back for webhooks. A node whose index job is already waiting (an import's) is
deduplicated onto it; while an import's thousands of index jobs are parked in the
organization's group, a webhook's node waits its turn behind them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from router.requests import JobRequest
from services.connectors.nodes import MalformedWebhook, NodeRef, WebhookEvent
from services.super_sources import store
from services.super_sources.connection_secrets import has_webhook_secret, webhook_secret_of
from services.super_sources.context import SuperContext
from services.super_sources.families import index_request
from services.super_sources.registry import WebhookSpec, index_touched
from shared.db.engine import session_scope
from shared.errors import QueueUnavailable, ValidationFailed

log = logging.getLogger(__name__)

#: How long a delivery id is remembered (GitHub and Linear redeliver for days at most).
REPLAY_TTL_SECONDS = 7 * 86_400
#: The root of index jobs whose delivery named no root node.
UNKNOWN_ROOT = NodeRef("webhook", "-")


@dataclass(frozen=True)
class Answer:
    """The HTTP answer to a delivery."""

    status: int
    body: dict[str, Any]


def receive(
    ctx: SuperContext,
    sessions: sessionmaker[Session],
    router: Router,
    *,
    source: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    connection_param: str | None,
    now: datetime | None = None,
) -> Answer:
    """Verify a delivery and enqueue its work; see the module's table."""
    entry = ctx.registry.get(source)
    hook = entry.webhook(path) if entry is not None else None
    if entry is None or hook is None:
        log.warning("webhook for an unknown source or path: %s/%s", source[:64], path[:64])
        return Answer(404, {"error": f"no webhook at /webhooks/{source}/{path}"})
    connection_id: int | None = None
    if connection_param is not None:
        digits = connection_param.isascii() and connection_param.isdigit()  # not "²"
        if not digits or not 0 < int(connection_param) < 2**63:
            return Answer(400, {"error": "connection must be a positive integer"})
        connection_id = int(connection_param)
    key = None if connection_id is not None else _root_key(hook, headers, body)
    with session_scope(sessions) as session:
        row = store.connection_for_webhook(session, source, connection_id, key)
        if row is None or not has_webhook_secret(row):
            return Answer(404, {"error": "no connection takes this webhook"})
        organization_id, conn_id = row.organization_id, row.id
        secret = webhook_secret_of(row, ctx.box) or ""
    if not hook.verify(headers, body, secret, now or datetime.now(UTC)):
        log.warning("webhook %s/%s: signature refused (connection %s)", source, path, conn_id)
        return Answer(401, {"error": "signature does not verify"})
    try:
        event = hook.parse(headers, body)
    except MalformedWebhook as exc:
        return Answer(400, {"error": str(exc)})
    replay_key = f"{ctx.namespace}:super:delivery:{source}:{conn_id}:{event.delivery_id}"
    if not ctx.client.set(replay_key, 1, nx=True, ex=REPLAY_TTL_SECONDS):
        return Answer(200, {"status": "duplicate", "delivery_id": event.delivery_id})
    try:
        answer = router.enqueue(_request(organization_id, source, path, conn_id, event))
    except (QueueUnavailable, ValidationFailed):
        ctx.client.delete(replay_key)
        raise
    chain = f" (chain {event.chain_id[:64]})" if event.chain_id else ""
    log.info("webhook %s/%s: delivery %s accepted%s", source, path, event.delivery_id, chain)
    return Answer(202, {"status": "accepted", "job_id": answer.job_id, "queue": answer.queue})


def _root_key(hook: WebhookSpec, headers: Mapping[str, str], body: bytes) -> str | None:
    """The payload's root node id, read before verification only to pick the connection."""
    try:
        event = hook.parse(headers, body)
    except MalformedWebhook:
        return None
    return event.root.node_id if event.root is not None else None


def _request(
    organization_id: int, source: str, path: str, connection_id: int, event: WebhookEvent
) -> JobRequest:
    return JobRequest(
        "super_webhook",
        organization_id,
        {
            "source": source,
            "path": path,
            "connection_id": connection_id,
            "delivery_id": event.delivery_id,
            "kind": event.kind[:128],
            "refs": [(ref.node_type, ref.node_id) for ref in event.refs],
            "removed": [(ref.node_type, ref.node_id) for ref in event.removed],
            "root": (event.root.node_type, event.root.node_id) if event.root else None,
            "received_at": time.time(),
        },
    )


def handle_delivery(
    sessions: sessionmaker[Session],
    router: Router,
    ctx: SuperContext,
    *,
    organization_id: int,
    source: str,
    path: str,
    connection_id: int,
    event: WebhookEvent,
) -> int:
    """Run the webhook's processor, then schedule an index job per node it names; returns
    how many nodes it named.

    Raises:
      RecordMissing: the connection is gone. Delay: its quota is spent (only for a
      processor that calls the provider).
    """
    with session_scope(sessions) as session:
        conn = ctx.connection(store.connection(session, organization_id, connection_id))
    hook = ctx.entry(source).webhook(path)
    if hook is None:
        log.warning("webhook job for %s/%s: the path is no longer registered", source, path)
        return 0
    if hook.processor is not index_touched:
        ctx.wait_for_quota(conn, webhook=True)
    work = hook.processor(conn, event)
    root = work.root or event.root or UNKNOWN_ROOT
    router.enqueue_many(
        [
            index_request(organization_id, source, connection_id, root, ref, webhook=True)
            for ref in work.refs
        ]
    )
    return len(work.refs)
