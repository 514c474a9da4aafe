"""HTTP pieces the super-source connectors share.

* :class:`NodeClient`: a :class:`shared.http.JsonClient` that shows every response to the
  connector (quota headers recorded, provider-specific rate-limit answers turned into
  ``Delay``) before the status is classified as everywhere else.
* :class:`UpdatedCursor`: a walk over a listing sorted by ``updated_at`` ascending whose
  pages are offsets (GitHub, GitLab). Offsets shift when an item is updated during the walk
  (it moves to the end, and the first item of the next page slides into the page already
  read), so each page restarts from the last ``updated_at`` seen (``since`` /
  ``updated_after`` are inclusive) and skips the items already seen at that instant; only
  a page made entirely of one instant goes on by offset.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import requests

from services.connectors.nodes import Connection
from shared.egress.addresses import AddressRefused
from shared.errors import Delay, Retryable
from shared.http import JsonClient, raise_for_status, retry_after_seconds

#: Looks at a response before its status is classified (may raise ``Delay``).
Inspect = Callable[[requests.Response, str], None]


class NodeClient(JsonClient):
    """A JSON client whose responses go through ``inspect`` first."""

    def __init__(
        self,
        base_url: str,
        *,
        inspect: Inspect,
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(base_url, headers=headers, timeout=timeout)
        self.inspect = inspect

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        what = f"{method} {path.split('?', 1)[0]}"
        url = self.url(path)
        try:
            response = self.session.request(
                method, url, timeout=kwargs.pop("timeout", self.timeout), **kwargs
            )
        except AddressRefused as refused:
            raise AddressRefused(url, refused.host, refused.address, refused.kind) from None
        except requests.RequestException as exc:
            raise Retryable(f"{what}: {type(exc).__name__}: {exc}") from exc
        self.inspect(response, what)
        raise_for_status(response, what)
        return response


def int_header(response: requests.Response, name: str) -> int | None:
    value = response.headers.get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def epoch_header(
    response: requests.Response, name: str, *, millis: bool = False
) -> datetime | None:
    """A header holding epoch seconds (or milliseconds) as an aware datetime."""
    value = int_header(response, name)
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000 if millis else value, UTC)


def retry_after(response: requests.Response) -> datetime | None:
    """When Retry-After says to come back; None when absent or unreadable."""
    seconds = retry_after_seconds(response.headers.get("Retry-After"))
    if seconds is None:
        return None
    return datetime.fromtimestamp(datetime.now(UTC).timestamp() + seconds, UTC)


def blocked(conn: Connection, until: datetime, what: str) -> Delay:
    """Record that ``conn`` may not call before ``until`` and say so as a ``Delay``."""
    conn.record_quota(None, until)
    return Delay(until.timestamp(), reason=f"rate-limit ({what})")


def backed_off(conn: Connection, base: float, what: str) -> Delay:
    """A ``Delay`` for a rate limit that names no end, growing with the connection's streak
    of them (:meth:`RateLimitState.repeated_limit`; ``base`` when the connection keeps no
    state), recorded on the connection like any other block."""
    state = conn.rate_limits
    wait = state.repeated_limit(conn, base) if state is not None else base
    until = datetime.fromtimestamp(datetime.now(UTC).timestamp() + wait, UTC)
    return blocked(conn, until, what)


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 timestamp (``Z`` or an offset) as an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass
class UpdatedCursor:
    """Where an updated-ascending walk stands: list from ``since`` (inclusive), skip the
    keys in ``seen`` (already listed at exactly ``since``), at offset page ``page``."""

    since: str | None = None
    seen: list[str] = field(default_factory=list)
    page: int = 1
    phase: str = ""

    def encode(self) -> str:
        return json.dumps(
            {"since": self.since, "seen": self.seen, "page": self.page, "phase": self.phase}
        )

    @classmethod
    def decode(cls, checkpoint: str | None, since: str | None, phase: str = "") -> UpdatedCursor:
        if not checkpoint:
            return cls(since=since, phase=phase)
        try:
            raw = json.loads(checkpoint)
            return cls(
                since=raw.get("since"),
                seen=[str(key) for key in raw.get("seen") or []],
                page=int(raw.get("page") or 1),
                phase=str(raw.get("phase") or ""),
            )
        except (ValueError, TypeError, AttributeError):
            # A checkpoint from another version: start this root over.
            return cls(since=since, phase=phase)

    def fresh(self, items: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """``(key, updated)`` items not listed before."""
        seen = set(self.seen)
        return [(k, u) for k, u in items if not (u == self.since and k in seen)]

    def advance(self, items: Sequence[tuple[str, str]], has_next: bool) -> UpdatedCursor | None:
        """The cursor after a page of ``(key, updated)`` items; None when it was the last."""
        if not has_next or not items:
            return None
        last = items[-1][1]
        at_last = [k for k, u in items if u == last]
        if last == self.since:
            return UpdatedCursor(last, self.seen + at_last, self.page + 1, self.phase)
        return UpdatedCursor(last, at_last, 1, self.phase)

    def high_water(self, items: Sequence[tuple[str, str]]) -> str | None:
        """The latest ``updated`` listed so far (the watermark of a complete walk)."""
        return items[-1][1] if items else self.since
