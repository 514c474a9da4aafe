"""The Slack post through slack_sdk against the local Slack protocol server: what landed,
what was refused (proven non-delivery) and what is uncertain."""

from __future__ import annotations

from datetime import date

import pytest

from services.reports.slack import (
    SECTION_LIMIT,
    SlackRefused,
    SlackTarget,
    SlackUncertain,
    post_report,
    report_blocks,
)
from services.reports.store import ReportRow
from testkit.fakes.slack_server import MAX_BLOCKS, POST_MESSAGE, SlackServer


def _rows(count: int) -> list[ReportRow]:
    return [
        ReportRow(i, f"Agent {i}", f"a{i}@x.test", 2, 80.0 + i % 10, 70.0) for i in range(count)
    ]


@pytest.fixture
def slack() -> SlackServer:
    return SlackServer()


def _target(base_url: str, **kw: object) -> SlackTarget:
    options: dict[str, object] = {
        "token": "xoxb-test",
        "channel": "C0REPORTS",
        "timeout_seconds": 10,
    }
    options.update(kw)
    return SlackTarget(base_url=f"{base_url}/api/", **options)  # type: ignore[arg-type]


def test_a_report_lands_once_with_its_blocks(slack: SlackServer) -> None:
    with slack as url:
        text, blocks = report_blocks("Acme", 7, date(2026, 12, 1), _rows(3))
        ts = post_report(_target(url), text, blocks)
    assert ts and [m["ts"] for m in slack.messages] == [ts]
    assert slack.messages[0]["blocks"][0]["type"] == "header"
    assert len(slack.messages[0]["blocks"]) == 2 + 3


def test_the_section_limit_keeps_a_large_organization_under_slacks_block_cap(
    slack: SlackServer,
) -> None:
    text, blocks = report_blocks("Big", 8, date(2026, 12, 1), _rows(SECTION_LIMIT + 30))
    assert len(blocks) <= MAX_BLOCKS
    assert sum(1 for b in blocks if b["type"] == "section") == SECTION_LIMIT + 1
    assert "30 more agent(s)" in blocks[-1]["elements"][0]["text"]
    with slack as url:
        post_report(_target(url), text, blocks)
    assert len(slack.messages) == 1


@pytest.mark.parametrize(
    ("setup", "status", "error", "transient"),
    [
        (lambda s: s.reject("channel_not_found"), 200, "channel_not_found", False),
        (lambda s: s.reject("ratelimited"), 200, "ratelimited", True),
        (lambda s: s.fail(POST_MESSAGE, "500"), 500, "internal_error", True),
        (lambda s: s.fail(POST_MESSAGE, "429", retry_after=7), 429, "ratelimited", True),
    ],
)
def test_an_answer_without_a_post_is_proven_non_delivery(
    slack: SlackServer, setup: object, status: int, error: str, transient: bool
) -> None:
    with slack as url:
        setup(slack)  # type: ignore[operator]
        with pytest.raises(SlackRefused) as refused:
            post_report(
                _target(url), "t", [{"type": "section", "text": {"type": "mrkdwn", "text": "x"}}]
            )
    assert (refused.value.status, refused.value.error, refused.value.transient) == (
        status,
        error,
        transient,
    )
    if status == 429:
        assert refused.value.retry_after == 7
    assert slack.messages == []


def test_a_bad_token_is_refused(slack: SlackServer) -> None:
    with slack as url, pytest.raises(SlackRefused) as refused:
        post_report(_target(url, token="xoxb-wrong"), "t", [{"type": "divider"}])
    assert refused.value.error == "invalid_auth" and not refused.value.transient


def test_a_timeout_after_the_message_landed_is_uncertain(slack: SlackServer) -> None:
    with slack as url:
        slack.fail(POST_MESSAGE, "slow", delay=2.5)
        with pytest.raises(SlackUncertain):
            post_report(_target(url, timeout_seconds=1), "t", [{"type": "divider"}])
        slack.sleep(2.0)
    assert len(slack.messages) == 1  # it landed although the sender saw a timeout


def test_a_truncated_answer_after_the_post_is_uncertain(slack: SlackServer) -> None:
    with slack as url:
        slack.fail(POST_MESSAGE, "truncated")
        with pytest.raises(SlackUncertain):
            post_report(_target(url), "t", [{"type": "divider"}])
    assert len(slack.messages) == 1  # Slack posted it; its answer was cut off


def test_a_dead_server_is_uncertain() -> None:
    with pytest.raises(SlackUncertain):
        post_report(
            SlackTarget("xoxb", "C", "http://127.0.0.1:9/api/", 1), "t", [{"type": "divider"}]
        )
