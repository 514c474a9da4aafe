"""Outbound delivery claims: every irreversible send is claimed before it is made.

The ledger is Rails' ``public.outbound_delivery_claims`` (one row per ``delivery_key``,
unique), shared with Rails' ``OutboundDeliveryClaim`` so either side sees the other's sends.
:func:`deliver_once` runs the whole protocol around one send:

==========================================  ==============================================
what happens                                 ledger and outcome
==========================================  ==============================================
no row: claimed, ``send`` returns            ``delivered_at`` set -> ``SENT``
row with ``delivered_at``                    nothing sent -> ``ALREADY_SENT``
``send`` raises :class:`NotDelivered`        row deleted (``release!``), the wrapped
(a provider rejection with a response)       outcome re-raised: the retry claims again
``send`` raises anything else (timeout,      row left unresolved, Sentry warning
dropped response, a raise after the          "... delivery outcome uncertain" with the key
provider may have accepted)                  -> ``UNCERTAIN`` (never resent automatically)
row unresolved, claimed < ``lease`` ago      another attempt is sending right now:
                                             :class:`~shared.errors.Delay` until the lease
                                             ends, attempt not spent
row unresolved, claimed >= ``lease`` ago     an earlier attempt died or was ambiguous:
                                             warning again -> ``UNCERTAIN``
==========================================  ==============================================

Each ledger write is its own short transaction (committed before ``send`` runs, so no
transaction is held open across the call). An operator resolves an uncertain claim by hand
(``speedtier claims list | mark-delivered KEY | release KEY``, the seed's "Resolving
uncertain delivery claims").
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from shared.db.base import utcnow
from shared.db.engine import session_scope
from shared.errors import Delay, JobError, Retryable, SpeedtierError
from shared.observability import warn

log = logging.getLogger(__name__)

#: How long a fresh unresolved claim is taken to be a send in flight (not yet uncertain).
DEFAULT_LEASE = timedelta(minutes=2)
UNCERTAIN_MESSAGE = "delivery outcome uncertain"


class DeliveryOutcome(enum.Enum):
    SENT = "sent"
    ALREADY_SENT = "already_sent"
    UNCERTAIN = "uncertain"


class NotDelivered(SpeedtierError):
    """Raised by a ``send`` for a proven non-delivery: the provider answered with a rejection
    (a Slack non-2xx or ``ok: false``, a Rails 4xx). The claim is released and ``outcome``
    (by default a :class:`~shared.errors.Retryable`) is raised in its place.
    """

    def __init__(self, reason: str, outcome: JobError | None = None) -> None:
        super().__init__(reason)
        self.outcome: JobError = outcome or Retryable(f"not delivered: {reason}")


@dataclass(frozen=True)
class Claim:
    """One ledger row."""

    id: int
    delivery_key: str
    delivered_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @property
    def resolved(self) -> bool:
        return self.delivered_at is not None


# -- ledger operations (each in its own transaction) -------------------------------------

_CLAIM = text(
    "INSERT INTO outbound_delivery_claims (delivery_key, created_at, updated_at)"
    " VALUES (:key, :now, :now) ON CONFLICT (delivery_key) DO NOTHING RETURNING id"
)
_FIND = text(
    "SELECT id, delivery_key, delivered_at, created_at, updated_at"
    " FROM outbound_delivery_claims WHERE delivery_key = :key"
)
_MARK = text(
    "UPDATE outbound_delivery_claims SET delivered_at = :now, updated_at = :now"
    " WHERE delivery_key = :key AND delivered_at IS NULL"
)
_RELEASE = text(
    "DELETE FROM outbound_delivery_claims WHERE delivery_key = :key AND delivered_at IS NULL"
)
_UNRESOLVED = text(
    "SELECT id, delivery_key, delivered_at, created_at, updated_at"
    " FROM outbound_delivery_claims WHERE delivered_at IS NULL ORDER BY created_at, id"
    " LIMIT :limit"
)


def _aware(value: Any) -> Any:
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and not value.tzinfo else value


def _claim_of(row: Any) -> Claim:
    return Claim(
        id=row.id,
        delivery_key=row.delivery_key,
        delivered_at=_aware(row.delivered_at),
        created_at=_aware(row.created_at),
        updated_at=_aware(row.updated_at),
    )


def claim(sessions: sessionmaker[Session], key: str) -> bool:
    """Insert the claim for ``key``; True when this call made it (committed on return)."""
    with session_scope(sessions) as session:
        made = session.execute(_CLAIM, {"key": key, "now": _utc_naive()}).first() is not None
        session.commit()
    return made


_CLAIM_DELIVERED = text(
    "INSERT INTO outbound_delivery_claims (delivery_key, delivered_at, created_at, updated_at)"
    " VALUES (:key, :now, :now, :now) ON CONFLICT (delivery_key) DO NOTHING RETURNING id"
)


def claim_delivered_in(session: Session, key: str) -> bool:
    """Claim ``key`` already delivered inside the caller's transaction: for an effect that
    is a write to this same database, committed together with its claim (no uncertain
    window). True when this call made the claim; False: it was claimed before."""
    return session.execute(_CLAIM_DELIVERED, {"key": key, "now": _utc_naive()}).first() is not None


def find(sessions: sessionmaker[Session], key: str) -> Claim | None:
    with session_scope(sessions) as session:
        row = session.execute(_FIND, {"key": key}).first()
    return _claim_of(row) if row is not None else None


def mark_delivered(sessions: sessionmaker[Session], key: str) -> bool:
    """``mark_delivered!``: True when an unresolved claim of ``key`` was marked."""
    with session_scope(sessions) as session:
        result = session.execute(_MARK, {"key": key, "now": _utc_naive()})
        marked = bool(result.rowcount)  # type: ignore[attr-defined]
        session.commit()
    return marked


def release(sessions: sessionmaker[Session], key: str) -> bool:
    """``release!`` (``releaseOutboundClaim``): drop an unresolved claim so a retry can send
    again. A delivered claim is never released here: True when a row was deleted."""
    with session_scope(sessions) as session:
        result = session.execute(_RELEASE, {"key": key})
        released = bool(result.rowcount)  # type: ignore[attr-defined]
        session.commit()
    return released


def unresolved(sessions: sessionmaker[Session], limit: int = 500) -> list[Claim]:
    """``OutboundDeliveryClaim.unresolved``: claims with no ``delivered_at``, oldest first."""
    with session_scope(sessions) as session:
        rows = session.execute(_UNRESOLVED, {"limit": limit}).all()
    return [_claim_of(row) for row in rows]


def _utc_naive() -> datetime:
    return utcnow().replace(tzinfo=None)


# -- the protocol --------------------------------------------------------------------------


def deliver_once(
    sessions: sessionmaker[Session],
    key: str,
    send: Callable[[], Any],
    *,
    what: str = "outbound",
    lease: timedelta = DEFAULT_LEASE,
    context: dict[str, Any] | None = None,
) -> DeliveryOutcome:
    """Send at most once per ``key``: claim, send, then mark delivered (the table above).

    Parameters:
      sessions: sessions on the database holding ``outbound_delivery_claims``.
      key: the delivery key (channel, job id and enqueue time, e.g.
        ``slack/daily-agent-eval-report-7-2026-11-30-no-email-bf/1764547200``).
      send: makes the irreversible call; raises :class:`NotDelivered` for a proven rejection.
      what: names the channel in the Sentry warning (``"slack report"`` ->
        ``"slack report delivery outcome uncertain"``).
      lease: how long a fresh unresolved claim counts as in flight.
      context: extra fields for the Sentry warning (organization id, job id...).

    Raises:
      the ``outcome`` of a :class:`NotDelivered` (after releasing the claim);
      :class:`~shared.errors.Delay` while another attempt's claim is fresh.
    """
    if not claim(sessions, key):
        return _existing(sessions, key, what=what, lease=lease, context=context)
    try:
        send()
    except NotDelivered as exc:
        release(sessions, key)
        log.warning("%s %s not delivered (%s); claim released", what, key, exc)
        raise exc.outcome from exc
    except Exception as exc:  # ambiguous: the provider may have accepted it
        _uncertain(key, what, context, error=f"{type(exc).__name__}: {exc}")
        return DeliveryOutcome.UNCERTAIN
    if not mark_delivered(sessions, key):
        # The row vanished under us (an operator released it while we sent): uncertain.
        _uncertain(key, what, context, error="claim gone before it could be marked delivered")
        return DeliveryOutcome.UNCERTAIN
    return DeliveryOutcome.SENT


def _existing(
    sessions: sessionmaker[Session],
    key: str,
    *,
    what: str,
    lease: timedelta,
    context: dict[str, Any] | None,
) -> DeliveryOutcome:
    existing = find(sessions, key)
    if existing is None:  # released between our insert and our read: try once more later
        raise Delay.after(1.0, reason=f"claim {key} released while read")
    if existing.resolved:
        return DeliveryOutcome.ALREADY_SENT
    age = utcnow() - existing.created_at
    if age < lease:
        raise Delay.after((lease - age).total_seconds() + 1.0, reason=f"{what} in flight: {key}")
    _uncertain(key, what, context, error=f"unresolved claim from {existing.created_at:%FT%TZ}")
    return DeliveryOutcome.UNCERTAIN


def _uncertain(key: str, what: str, context: dict[str, Any] | None, *, error: str) -> None:
    warn(
        f"{what} {UNCERTAIN_MESSAGE}",
        fingerprint=["speedtier", "delivery-uncertain", what],
        delivery_key=key,
        error=error,
        **(context or {}),
    )
