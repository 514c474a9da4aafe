"""What a super source gives the import, index and webhook families, whatever its API.

A super source (GitHub, Linear, GitLab, Git, Notion, a website) is a tree of nodes: root
nodes an organization connects (a repository, a team, a project, a page, a site) and, under
each, indexable nodes (issues, pull requests, comments, files, pages). A connector module
implements :class:`NodeSource` and, when the provider sends webhooks, a ``verify`` and a
``parse`` function. The product (``services/super_sources``) owns jobs, checkpoints,
dates already indexed and the webhook routes; a connector owns only the provider's protocol.

==========================  ==========================================================
call                        contract
==========================  ==========================================================
``list_roots(conn)``        the root nodes the connection can see (for a picker)
``walk(conn, root, cp,      one page of the root's indexable refs; ``checkpoint`` of the
since)``                    page is where the next call resumes (None: the walk is
                            complete, and ``watermark`` is where the next walk may start,
                            passed back as ``since``: an incremental walk)
``fetch(conn, ref)``        the node's text now; None when the provider says it is gone
``verify(headers, body,     the webhook's signature (constant time; Linear also checks its
secret, now)``              timestamp window)
``parse(headers, body)``    the delivery id and the refs the webhook touched
==========================  ==========================================================

Errors are the shared hierarchy (through :class:`shared.http.JsonClient`): ``Delay`` for a
rate limit with a known end (429/403 with Retry-After, an exhausted quota), ``Retryable``
for 5xx, timeouts and truncated pages, ``Unrecoverable`` for 401/403 and other 4xx
(``NotFound`` for 404 outside ``fetch``). When ``Connection.rate_limits`` is set, every
response's quota headers are recorded there, so the next job of the same connection can ask
:meth:`RateLimitState.blocked_until` before calling the provider.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import redis

from shared.errors import SpeedtierError, Unrecoverable

#: A quota left at or under this many calls blocks the connection's bulk (import and index)
#: work until its reset; webhook work may spend it (see :class:`RateLimitState`).
DEFAULT_RESERVE = 0
#: The longest wait of the backoff after repeated rate limits (``SPEEDTIER_RATE_LIMIT_BACKOFF_
#: MAX_SECONDS`` in a process).
DEFAULT_BACKOFF_MAX_SECONDS = 900.0


def backoff_seconds(
    streak: int, base: float, cap: float, rand: Callable[[], float] = random.random
) -> float:
    """The wait after the ``streak``-th rate limit in a row: exponential with jitter, never
    under ``base`` (GitHub: "at least one minute") nor over ``cap``. With ``c = min(cap,
    base * 2**(n-1))``, the n-th wait is drawn in ``[max(base, c/2), c]`` (the first is
    ``base``), as both references ask ("wait for an exponentially increasing amount of time",
    https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api; "a
    truncated exponential backoff", https://developers.google.com/workspace/drive/api/guides/
    limits)."""
    ceiling = min(cap, base * 2 ** min(max(streak, 1) - 1, 32))
    floor = min(ceiling, max(base, ceiling / 2))
    return float(floor + (ceiling - floor) * rand())


class ResyncRequired(Unrecoverable):
    """The provider rejected the change token or delta link an incremental walk started from
    (Drive's ``changes.list`` 400/404/410, Graph's ``410 Gone`` ``resyncRequired``): the
    walk must start over as a complete one. ``restart`` is where the provider says that
    walk begins (Graph's ``Location``, a path under the connection's base), None: the
    walk's own start. Unhandled, it fails the job as any ``Unrecoverable``."""

    def __init__(self, message: str, restart: str | None = None) -> None:
        super().__init__(message)
        self.restart = restart


@dataclass(frozen=True)
class NodeRef:
    """A node's identity in its source: ``node_type`` (e.g. ``GithubIssue``) and an id that
    is enough, with the connection, to fetch it (e.g. ``octo/hello#12``)."""

    node_type: str
    node_id: str


@dataclass(frozen=True)
class Node:
    """One node's current content.

    ``synchronization_date`` is the provider's last-modified time (UTC-aware): the index
    skips the node when it is not newer than what was indexed. ``parent`` is the node it
    hangs under (a comment's issue), None for a node directly under its root.
    ``media_type`` says how to read ``text`` when it is not plain (see the field).
    """

    ref: NodeRef
    title: str
    text: str
    url: str | None
    synchronization_date: datetime
    parent: NodeRef | None = None
    #: The text's media type when it is not plain text or markdown (``text/html`` for a
    #: Google Doc exported as HTML, ``text/csv`` for a Sheet); None: plain text.
    media_type: str | None = None


@dataclass(frozen=True)
class WalkPage:
    """One page of a root's walk.

    ``checkpoint`` is opaque; pass it back to ``walk`` to get the next page. None: the walk
    is complete, and then ``watermark`` (possibly None) is where the next walk of this root
    may start (pass it as ``since``): a time for the issue trackers, a commit for Git.
    ``dates`` carries the listing's last-modified time of refs when the listing knows it,
    so an index job may skip an unchanged node without fetching it.
    """

    refs: list[NodeRef]
    checkpoint: str | None
    watermark: str | None = None
    dates: Mapping[NodeRef, datetime] = field(default_factory=dict)


@dataclass(frozen=True)
class WebhookEvent:
    """A verified delivery, parsed.

    ``delivery_id`` is the provider's id of the delivery (replays repeat it). ``root`` is the
    root node the touched nodes belong to (a repository, a team, a project) when the payload
    names it; ``refs`` are the nodes to index again, ``removed`` those the provider deleted.
    ``kind`` is the provider's event name (``issues``, ``Issue``, ``Merge Request Hook``...).
    ``chain_id`` names the chain of deliveries an event belongs to when the provider says so
    (GitLab's ``X-Gitlab-Event-UUID``, shared by recursive webhooks): for logs, never a
    replay key.
    """

    delivery_id: str
    refs: list[NodeRef]
    root: NodeRef | None = None
    removed: list[NodeRef] = field(default_factory=list)
    kind: str = ""
    chain_id: str = ""


@dataclass(frozen=True)
class Connection:
    """One organization's connection to a source.

    ``credentials`` hold tokens (``token``, ``api_key``...), ``settings`` the rest (limits,
    paths). ``rate_limits``, when given, records the provider's quota headers per connection.
    """

    source: str
    connection_id: int
    organization_id: int
    base_url: str
    credentials: Mapping[str, Any]
    settings: Mapping[str, Any]
    timeout: float = 30.0
    rate_limits: RateLimitState | None = field(default=None, compare=False, repr=False)

    def record_quota(self, remaining: int | None, reset_at: datetime | None) -> None:
        """Record a response's quota headers when this connection keeps them."""
        if self.rate_limits is not None:
            self.rate_limits.record(self, remaining, reset_at)


class NodeSource(Protocol):
    """A super source's connector. Implementations raise the shared error hierarchy."""

    source: str
    root_node_types: tuple[str, ...]
    indexable_node_types: tuple[str, ...]

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        """The root nodes the connection can see."""
        ...

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        """One page of ``root``'s indexable refs, from ``checkpoint`` (None: the start).
        ``since`` is a previous complete walk's watermark: list only what changed after it."""
        ...

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        """The node now; None when the provider says it no longer exists (404)."""
        ...


class MalformedWebhook(SpeedtierError):
    """A webhook body or its headers cannot be read (answer 400, do not retry)."""


def webhook_payload(body: bytes, what: str) -> dict[str, Any]:
    """The delivery's body as the JSON object a webhook sends; raises
    :class:`MalformedWebhook` when it is not one (not JSON, nested too deep to read, or
    another JSON value). ``what`` names the delivery in the message."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
        raise MalformedWebhook(f"{what}: unreadable payload ({reason})") from None
    if not isinstance(payload, dict):
        raise MalformedWebhook(f"{what}: the payload is not a JSON object")
    return payload


def as_object(value: Any) -> dict[str, Any]:
    """``value`` when the payload holds an object there, else an empty one (a field of the
    wrong type reads as absent)."""
    return value if isinstance(value, dict) else {}


def storable_event(event: WebhookEvent, what: str) -> WebhookEvent:
    """``event`` when every text in it can be stored (PostgreSQL text holds neither NUL
    nor a lone surrogate, which UTF-8 cannot encode); raises :class:`MalformedWebhook`
    naming the first one that cannot (``what`` names the delivery)."""
    refs = [ref for ref in (event.root, *event.refs, *event.removed) if ref is not None]
    texts = [("delivery id", event.delivery_id), ("event kind", event.kind)]
    texts += [(f"{ref.node_type} id", ref.node_id) for ref in refs]
    for name, text in texts:
        try:
            text.encode()
        except UnicodeEncodeError:
            raise MalformedWebhook(f"{what}: its {name} is not valid UTF-8 text") from None
        if "\x00" in text:
            raise MalformedWebhook(f"{what}: its {name} must not contain NUL (U+0000)")
    return event


class WebhookVerify(Protocol):
    """``verify(headers, body, secret, now)``: True when the delivery is signed with
    ``secret`` (compared in constant time) and, for providers that stamp it, fresh at
    ``now``. Header names are matched case-insensitively."""

    def __call__(
        self, headers: Mapping[str, str], body: bytes, secret: str, now: datetime
    ) -> bool: ...


class WebhookParse(Protocol):
    """``parse(headers, body)``: the event of a verified delivery; raises
    :class:`MalformedWebhook` when it cannot be read."""

    def __call__(self, headers: Mapping[str, str], body: bytes) -> WebhookEvent: ...


def header(headers: Mapping[str, str], name: str) -> str | None:
    """``headers[name]`` whatever the case of either."""
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


_RECORD = """
local reset_ms = tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  local current = tonumber(redis.call('GET', key) or '0')
  if reset_ms > current then
    redis.call('SET', key, ARGV[1], 'PXAT', reset_ms)
  end
end
return 1
"""


class RateLimitState:
    """Provider quota per connection, in Redis, shared by every worker.

    ``record`` is called with each response's quota headers (remaining calls, reset time).
    Two blocks per connection, each until the reset:

    - the **bulk** block (import and index work): the quota left is at or under the
      connection's reserve;
    - the **hard** block (everything, webhook work included): the quota is spent (0 left),
      or a 429 / secondary limit gave a Retry-After (``remaining`` None).

    The calls between the reserve and 0 are kept for webhook work, so a webhook's fetch does
    not wait for the reset behind an import that spent the quota. The reserve is a
    connection's ``settings.webhook_reserve`` when set, else its source's (``reserves``, the
    product's registry), else ``reserve``. Blocks only grow:
    of two budgets (Linear's requests and complexity) the later reset wins, and a key
    expires at its reset. Several workers calling at once can overshoot a reserve by the
    calls already in flight, so a reserve should exceed the workers' concurrency.
    """

    def __init__(
        self,
        client: redis.Redis,
        namespace: str,
        *,
        reserve: int = DEFAULT_RESERVE,
        reserves: Mapping[str, int] | None = None,
        backoff_max_seconds: float = DEFAULT_BACKOFF_MAX_SECONDS,
    ) -> None:
        self.namespace = namespace
        self.reserve = reserve
        self.reserves = dict(reserves or {})
        self.backoff_max_seconds = backoff_max_seconds
        self._client = client
        self._record = client.register_script(_RECORD)

    def reserve_for(self, conn: Connection) -> int:
        """The calls kept back for webhook work on ``conn``."""
        own = conn.settings.get("webhook_reserve")
        if isinstance(own, int) and not isinstance(own, bool) and own >= 0:
            return own
        return self.reserves.get(conn.source, self.reserve)

    def key(self, conn: Connection) -> str:
        """The hard block's key (the bulk block's is this plus ``:bulk``)."""
        return ":".join((self.namespace, "super", "quota", conn.source, str(conn.connection_id)))

    def record(self, conn: Connection, remaining: int | None, reset_at: datetime | None) -> None:
        """Block ``conn``'s bulk work until ``reset_at`` when ``remaining`` is at or under the
        reserve, and all its work when it is 0 (``remaining`` None with a ``reset_at``: all
        blocked regardless, e.g. a Retry-After)."""
        if reset_at is None:
            return
        if remaining is None or remaining <= 0:
            keys = [self.key(conn), self.key(conn) + ":bulk"]
        elif remaining <= self.reserve_for(conn):
            keys = [self.key(conn) + ":bulk"]
        else:
            return
        reset_ms = int(reset_at.timestamp() * 1000)
        if reset_ms <= int(datetime.now(UTC).timestamp() * 1000):
            return
        self._record(keys=keys, args=[reset_ms])

    def repeated_limit(self, conn: Connection, base: float) -> float:
        """The seconds to wait after one more rate limit of ``conn`` that names no end (GitHub's
        secondary limit, Drive's 403 rate limits): :func:`backoff_seconds` of the
        connection's streak of them, which is forgotten twice that wait after the last."""
        key = self.key(conn) + ":streak"
        streak = int(self._client.incr(key))
        wait = backoff_seconds(streak, base, self.backoff_max_seconds)
        self._client.expire(key, int(2 * wait + base) + 1)
        return wait

    def blocked_until(
        self, conn: Connection, now: datetime | None = None, *, reserved: bool = False
    ) -> datetime | None:
        """When ``conn`` may call the provider again; None: now. ``reserved``: for webhook
        work, which may spend the reserve (blocked only by the hard block)."""
        keys = [self.key(conn)] if reserved else [self.key(conn), self.key(conn) + ":bulk"]
        raws = [raw for raw in self._client.mget(keys) if raw is not None]
        if not raws:
            return None
        until = datetime.fromtimestamp(max(int(raw) for raw in raws) / 1000, UTC)
        return until if until > (now or datetime.now(UTC)) else None
