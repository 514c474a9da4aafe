"""The Rails internal client against the local Rails-protocol server: every answer class of
the outcome table (success, 401, 404, 4xx with Rails' classification, 5xx, 429 with and
without Retry-After, timeout, truncated body)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.rails.client import (
    RailsClient,
    RailsNotConfigured,
    RailsRecordMissing,
    RailsRetryable,
    RailsTransportError,
    RailsUnrecoverable,
)
from shared.config import load_settings
from shared.errors import Delay, RecordMissing, Retryable, Unrecoverable
from testkit.fakes.rails_server import RailsServer

UNIT21 = "/internal/organization_data_sources/{}/sync_unit21"


@pytest.fixture
def rails() -> Iterator[RailsServer]:
    server = RailsServer(token="tkn")
    with server:
        yield server


def client_for(server: RailsServer, token: str = "tkn", timeout: float = 5.0) -> RailsClient:
    return RailsClient(server.base_url, token, timeout=timeout)


def test_success_returns_rails_json_and_sends_the_bearer_token(rails: RailsServer) -> None:
    answer = client_for(rails).post(UNIT21.format(7))
    assert answer == {"organization_data_source_id": 7, "status": "synced"}
    (call,) = rails.calls(UNIT21.format(7))
    assert call.headers["authorization"] == "Bearer tkn"


def test_a_wrong_token_is_unrecoverable(rails: RailsServer) -> None:
    with pytest.raises(RailsUnrecoverable) as caught:
        client_for(rails, token="wrong").post(UNIT21.format(7))
    assert caught.value.status == 401 and isinstance(caught.value, Unrecoverable)


def test_404_is_record_missing(rails: RailsServer) -> None:
    rails.missing["unit21"].add(9)
    with pytest.raises(RailsRecordMissing) as caught:
        client_for(rails).post(UNIT21.format(9))
    assert isinstance(caught.value, RecordMissing)
    assert caught.value.error_class == "ActiveRecord::RecordNotFound"


def test_a_4xx_keeps_rails_classification_in_its_message(rails: RailsServer) -> None:
    rails.reject(UNIT21.format(3), 422, "Unit21::AuthenticationError", message="bad key")
    with pytest.raises(RailsUnrecoverable) as caught:
        client_for(rails).post(UNIT21.format(3))
    error = caught.value
    assert error.answered and error.retryable is False
    assert error.error_class == "Unit21::AuthenticationError"
    # the job record's last_error is "Type: str(exc)": the classification is in it
    assert "Unit21::AuthenticationError" in str(error) and "422" in str(error)


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_is_retryable(rails: RailsServer, status: int) -> None:
    rails.reject(UNIT21.format(3), status, "Unit21::Timeout", retryable=True)
    with pytest.raises(RailsRetryable) as caught:
        client_for(rails).post(UNIT21.format(3))
    assert isinstance(caught.value, Retryable) and caught.value.retryable is True


@pytest.mark.parametrize(
    ("status", "retryable", "raised"),
    [
        (409, True, RailsRetryable),  # Rails says "try again" on a 4xx: retried
        (422, True, RailsRetryable),
        (500, False, RailsUnrecoverable),  # Rails says "never" on a 5xx: failed at once
        (503, False, RailsUnrecoverable),
        (404, True, RailsRetryable),  # a record Rails expects to appear
    ],
)
def test_rails_retryable_flag_decides_over_the_status(
    rails: RailsServer, status: int, retryable: bool, raised: type[Exception]
) -> None:
    rails.reject(UNIT21.format(5), status, "Some::Error", retryable=retryable)
    with pytest.raises(raised) as caught:
        client_for(rails).post(UNIT21.format(5))
    assert type(caught.value) is raised and caught.value.status == status


@pytest.mark.parametrize(
    ("status", "body", "raised"),
    [
        (409, {"error": "conflict"}, RailsUnrecoverable),
        (503, {"error": "down"}, RailsRetryable),
        (502, "<html>bad gateway</html>", RailsRetryable),
        (422, {"retryable": "yes"}, RailsUnrecoverable),  # not a boolean: no verdict
        (404, {"error": "not found"}, RailsRecordMissing),
    ],
)
def test_without_a_verdict_the_status_decides(
    rails: RailsServer, status: int, body: object, raised: type[Exception]
) -> None:
    rails.reply(UNIT21.format(6), status, body)
    with pytest.raises(raised) as caught:
        client_for(rails).post(UNIT21.format(6))
    assert type(caught.value) is raised


def test_429_with_retry_after_delays_and_without_retries(rails: RailsServer) -> None:
    path = UNIT21.format(4)
    rails.fail(path, "429", retry_after=40)
    with pytest.raises(Delay) as delayed:
        client_for(rails).post(path)
    assert delayed.value.until > 0
    rails.fail(path, "429")
    with pytest.raises(RailsRetryable):
        client_for(rails).post(path)


def test_timeouts_and_truncated_bodies_are_transport_errors(rails: RailsServer) -> None:
    path = UNIT21.format(5)
    rails.fail(path, "slow", delay=3.0)
    with pytest.raises(RailsTransportError) as caught:
        client_for(rails, timeout=0.5).post(path)
    assert not caught.value.answered  # ambiguous: it may have run
    rails.fail(path, "truncated")
    with pytest.raises(RailsTransportError):
        client_for(rails).post(path)


def test_nothing_listening_is_a_transport_error() -> None:
    with pytest.raises(RailsTransportError):
        RailsClient("http://127.0.0.1:1", "tkn", timeout=1).post("/internal/counter_caches/fix")


def test_without_a_url_the_client_says_which_variable_is_missing() -> None:
    with pytest.raises(RailsNotConfigured, match="RAILS_INTERNAL_URL"):
        RailsClient.from_settings(load_settings(rails_internal_url=None))


def test_every_endpoint_the_seed_names_answers(rails: RailsServer) -> None:
    client = client_for(rails)
    for path, body in [
        ("/internal/expired_evaluations/process", {}),
        ("/internal/conversations/5/summarize", {}),
        ("/internal/counter_caches/fix", {"step": "sheet_rows"}),
        ("/internal/conversation_uploads/5/check", {}),
        ("/internal/conversation_uploads/5/process_direct", {}),
        ("/internal/conversation_uploads/5/retry_direct", {}),
        ("/internal/conversation_uploads/5/mark_failed", {}),
        ("/internal/provider_conversation_sync_completions/enqueue", {"sync_run_id": "x"}),
        ("/internal/daily_agent_evaluation_reports/collect", {}),
        ("/internal/daily_agent_evaluation_reports/backfill_preview", {}),
    ]:
        assert isinstance(client.post(path, body), dict)
    email = "/internal/daily_agent_evaluation_reports/email"
    assert client.post(email, {"delivery_key": "k1"})["status"] == "sent"
    assert client.post(email, {"delivery_key": "k1"})["status"] == "already_sent"
    assert rails.sent_delivery_keys == ["k1"]
