"""The per-organization Slack report: its payload and its post through ``slack_sdk``.

The post either landed, was provably refused, or its outcome is unknown; the caller's
delivery claim needs to know which:

=========================================  ===================  ============================
Slack answered                             raised               the claim
=========================================  ===================  ============================
``ok: true``                               (returns the ``ts``)  delivered
HTTP 429 (``Retry-After``)                 ``SlackRefused``     released; job delayed
HTTP 5xx, ``ok: false`` transient codes    ``SlackRefused``     released; job retried
``ok: false`` (auth, channel, blocks...)   ``SlackRefused``     released; job fails
timeout, reset, no parseable answer        ``SlackUncertain``   left unresolved (Sentry)
=========================================  ===================  ============================

A Slack non-2xx or ``ok: false`` is a response: Slack did not post the message, so the
claim may be released and the post retried. The client is built with no retry handlers:
``slack_sdk`` would otherwise repeat a post after a connection error, which may follow a
message that landed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from services.reports.store import ReportRow
from shared.errors import SpeedtierError

#: Agent sections one organization's message carries; Slack takes at most 50 blocks, and
#: the header, the summary and the "more agents" note take the other three.
SECTION_LIMIT = 47
#: ``ok: false`` codes worth a retry (Slack's own transient failures).
TRANSIENT_ERRORS = frozenset(
    {"internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited"}
)


class SlackRefused(SpeedtierError):
    """Slack answered and did not post: proven non-delivery.

    Attributes:
      status: Slack's HTTP status; error: its ``error`` code; retry_after: seconds, on 429.
    """

    def __init__(self, status: int, error: str, retry_after: float | None = None) -> None:
        super().__init__(f"Slack refused chat.postMessage: HTTP {status} {error}")
        self.status = status
        self.error = error
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        return self.status >= 500 or self.status == 429 or self.error in TRANSIENT_ERRORS


class SlackUncertain(SpeedtierError):
    """No answer from Slack (timeout, reset): the message may have landed."""


@dataclass(frozen=True)
class SlackTarget:
    """Where reports are posted: the bot token, the channel, and Slack's API root."""

    token: str
    channel: str
    base_url: str = "https://slack.com/api/"
    timeout_seconds: float = 30.0


def report_blocks(
    organization_name: str, organization_id: int, day: date, rows: Sequence[ReportRow]
) -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and blocks of one organization's report (at most
    :data:`SECTION_LIMIT` agent sections)."""
    evaluations = sum(row.evaluations for row in rows)
    title = f"Daily agent evaluations: {organization_name} (#{organization_id}) {day}"
    summary = f"{len(rows)} agent(s), {evaluations} completed evaluation(s)"
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        {"type": "section", "text": {"type": "mrkdwn", "text": summary}},
    ]
    for row in rows[:SECTION_LIMIT]:
        score = "n/a" if row.average_score is None else f"{row.average_score:.1f}%"
        lowest = "n/a" if row.lowest_score is None else f"{row.lowest_score:.1f}%"
        line = (
            f"*{_escape(row.agent_name or f'agent {row.agent_id}')}*: {row.evaluations} "
            f"evaluation(s), average {score}, lowest {lowest}"
        )
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": line[:3000]}})
    hidden = len(rows) - SECTION_LIMIT
    if hidden > 0:
        note = f"... and {hidden} more agent(s): see the CSV"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": note}]})
    return f"{title}: {summary}", blocks


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def post_report(target: SlackTarget, text: str, blocks: list[dict[str, Any]]) -> str:
    """Post one message; returns its ``ts``.

    Raises:
      SlackRefused: Slack answered without posting (non-2xx or ``ok: false``).
      SlackUncertain: no usable answer; the message may have landed.
    """
    # Imported here: slack_sdk (1.6 MiB) stays out of processes that never post a report.
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

    client = WebClient(
        token=target.token,
        base_url=target.base_url,
        timeout=int(max(1, target.timeout_seconds)),
        retry_handlers=[],
    )
    try:
        response = client.chat_postMessage(channel=target.channel, text=text, blocks=blocks)
    except SlackApiError as exc:
        answer = exc.response
        status = int(getattr(answer, "status_code", 0) or 0)
        data = getattr(answer, "data", None)
        error = str(data.get("error", "unknown")) if isinstance(data, dict) else "no_body"
        if not status:
            raise SlackUncertain(f"Slack gave no status: {exc}") from exc
        retry_after = _retry_after(getattr(answer, "headers", {}) or {})
        raise SlackRefused(status, error, retry_after) from exc
    except Exception as exc:  # timeouts, resets, unparseable bodies: the post may have landed
        raise SlackUncertain(f"no answer from Slack: {type(exc).__name__}: {exc}") from exc
    return str(response.get("ts") or "")


def _retry_after(headers: Any) -> float | None:
    for name, value in dict(headers).items():
        if str(name).lower() == "retry-after":
            raw = value[0] if isinstance(value, list) else value
            try:
                return max(0.0, float(raw))
            except (TypeError, ValueError):
                return None
    return None
