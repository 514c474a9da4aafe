"""Outbound delivery claims on real PostgreSQL: one send per key, release on a proven
rejection only, unresolved (and reported) on ambiguity, a fresh claim of another attempt
waited for, and two racing senders sending once."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import sentry_sdk
from sqlalchemy.orm import Session, sessionmaker

from services.rails import delivery_claims as claims
from services.rails.delivery_claims import DeliveryOutcome, NotDelivered, deliver_once
from shared.errors import Delay, Retryable
from testkit.fakes.sentry_server import SentryInbox, fake_sentry


@pytest.fixture
def key() -> str:
    return f"slack/test-job-{uuid.uuid4().hex}/1764547200"


@pytest.fixture
def sentry() -> Iterator[SentryInbox]:
    """Sentry events of this test only: a client bound to an isolation scope."""
    with fake_sentry() as (dsn, inbox), sentry_sdk.isolation_scope() as scope:
        client = sentry_sdk.Client(dsn=dsn, default_integrations=False)
        scope.set_client(client)
        yield inbox
        client.flush(timeout=5)


def uncertain_warnings(inbox: SentryInbox) -> list[dict[str, Any]]:
    return [
        event
        for event in inbox.events()
        if claims.UNCERTAIN_MESSAGE in str(event.get("logentry") or event.get("message"))
    ]


def test_a_key_is_sent_once(db_session_factory: sessionmaker[Session], key: str) -> None:
    sent: list[int] = []
    first = deliver_once(db_session_factory, key, lambda: sent.append(1))
    second = deliver_once(db_session_factory, key, lambda: sent.append(2))
    assert (first, second) == (DeliveryOutcome.SENT, DeliveryOutcome.ALREADY_SENT)
    assert sent == [1]
    claim = claims.find(db_session_factory, key)
    assert claim is not None and claim.resolved


def test_a_proven_rejection_releases_the_claim_and_the_retry_sends(
    db_session_factory: sessionmaker[Session], key: str
) -> None:
    def rejected() -> None:
        raise NotDelivered("slack answered 500")

    with pytest.raises(Retryable):
        deliver_once(db_session_factory, key, rejected)
    assert claims.find(db_session_factory, key) is None  # released
    sent: list[int] = []
    assert deliver_once(db_session_factory, key, lambda: sent.append(1)) is DeliveryOutcome.SENT
    assert sent == [1]


def test_an_ambiguous_failure_stays_unresolved_is_reported_and_never_resent(
    db_session_factory: sessionmaker[Session], key: str, sentry: SentryInbox
) -> None:
    def timed_out() -> None:
        raise TimeoutError("read timed out after the message landed")

    outcome = deliver_once(db_session_factory, key, timed_out, what="slack report")
    assert outcome is DeliveryOutcome.UNCERTAIN
    claim = claims.find(db_session_factory, key)
    assert claim is not None and not claim.resolved
    assert key in [c.delivery_key for c in claims.unresolved(db_session_factory)]
    # a later attempt (past the lease) does not resend
    sent: list[int] = []
    again = deliver_once(db_session_factory, key, lambda: sent.append(1), lease=timedelta(0))
    assert again is DeliveryOutcome.UNCERTAIN and sent == []
    sentry_sdk.get_client().flush(timeout=5)
    warnings = uncertain_warnings(sentry)
    assert len(warnings) == 2
    assert warnings[0]["extra"]["delivery_key"] == key
    assert warnings[0]["level"] == "warning"


def test_a_fresh_claim_of_another_attempt_is_waited_for(
    db_session_factory: sessionmaker[Session], key: str
) -> None:
    assert claims.claim(db_session_factory, key)  # another worker is sending right now
    with pytest.raises(Delay):
        deliver_once(db_session_factory, key, lambda: None)


def test_an_operator_resolves_an_uncertain_claim(
    db_session_factory: sessionmaker[Session], key: str
) -> None:
    assert claims.claim(db_session_factory, key)
    assert claims.mark_delivered(db_session_factory, key)
    assert not claims.release(db_session_factory, key)  # a delivered claim stays
    other = key + "-b"
    assert claims.claim(db_session_factory, other)
    assert claims.release(db_session_factory, other)
    assert claims.find(db_session_factory, other) is None


def test_two_racing_senders_send_once(db_session_factory: sessionmaker[Session], key: str) -> None:
    sent: list[str] = []
    start = threading.Barrier(2)
    outcomes: list[object] = []

    def sender(name: str) -> None:
        start.wait()
        try:
            outcomes.append(deliver_once(db_session_factory, key, lambda: sent.append(name)))
        except Delay as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=sender, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sent) == 1
    assert DeliveryOutcome.SENT in outcomes
