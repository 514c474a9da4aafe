"""A local server speaking Rails' ``/internal/*`` protocol (seed 001), for every family.

Rails keeps "narrow authenticated /internal/* endpoints that execute model-bound work
synchronously" (seed 001, ENG-2920). This fake answers each endpoint the seed names the way
``Internal::BaseController`` does: ``Authorization: Bearer <token>`` or 401; a record that
does not exist is 404; success is 200 with the endpoint's JSON; a failure is Rails' error
body ``{"error": <message>, "error_class": <Ruby class>, "retryable": <bool>}`` with 422
(terminal) or 500/503 (retryable); a throttled call is 429 with ``Retry-After``.

=====================================================================  ====================
endpoint                                                               success body
=====================================================================  ====================
``POST /internal/expired_evaluations/process``                         candidate/failure
                                                                       counts
``POST /internal/organization_data_sources/:id/sync_unit21``           the sync payload
``POST /internal/conversations/:id/summarize``                         ``{"status": ...}``
``POST /internal/counter_caches/fix`` (``{"step": name}``)             rows fixed
``POST /internal/conversation_uploads/:id/check``                      upload status
``POST /internal/conversation_uploads/:id/process_direct``             upload status
``POST /internal/conversation_uploads/:id/retry_direct``               upload status
``POST /internal/conversation_uploads/:id/mark_failed``                upload status
``POST /internal/provider_conversation_sync_completions/enqueue``      ``{"accepted": true}``
``POST /internal/conversations/:id/complete_conversation_sync``        ``{"status":
  (``{"organization_id", "conversation_upload_id", "sync_run_id"}``:     "completed"}``
  what ``CompleteConversationSyncJob`` did, called by API2's XCALLY
  completion job; ``on_complete_sync`` lets a test apply its effect)
``POST /internal/daily_agent_evaluation_reports/collect``              report rows
``POST /internal/daily_agent_evaluation_reports/backfill_preview``     the backfill run
``POST /internal/daily_agent_evaluation_reports/email``                ``sent`` /
  (``delivery_key`` honoured: a key already sent answers               ``already_sent``
  ``already_sent`` and sends nothing)
=====================================================================  ====================

Bodies the callers send: Unit21 sync and summarize ``{"organization_id"}``; counter caches
``{"step": <one of COUNTER_CACHE_STEPS>}``; the reports' collect and backfill preview
``{"organization_id", "date"}`` (collect answers ``{"rows": [{"agent_id", "agent_name",
"agent_email", "evaluations", "average_score", "lowest_score"}]}``); the per-organization
email ``{"organization_id", "date", "source", "delivery_key"}`` and the combined email
``{"kind": "combined", "delivery_key", "attachments": [...]}``.

Scripting, per test: ``fail(path, "404" | "429" | "500" | "slow" | "truncated", ...)``
(the shared :class:`~testkit.fakes.protocol_server.ProtocolServer` failures) and
``reply(path, status, body)`` / ``reject(path, status, error_class, retryable)`` to queue
exact answers for the next calls on a path (first in, first out), ``missing`` to make ids
404, ``results[path]`` to set a path's success body. ``calls(path)`` lists what was asked.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request

_ID = r"(?P<id>[0-9]+)"
ROUTES: tuple[tuple[str, str], ...] = (
    ("expired_evaluations", r"/internal/expired_evaluations/process"),
    ("unit21", rf"/internal/organization_data_sources/{_ID}/sync_unit21"),
    ("summarize", rf"/internal/conversations/{_ID}/summarize"),
    ("counter_caches", r"/internal/counter_caches/fix"),
    ("upload_check", rf"/internal/conversation_uploads/{_ID}/check"),
    ("upload_process_direct", rf"/internal/conversation_uploads/{_ID}/process_direct"),
    ("upload_retry_direct", rf"/internal/conversation_uploads/{_ID}/retry_direct"),
    ("upload_mark_failed", rf"/internal/conversation_uploads/{_ID}/mark_failed"),
    ("sync_completion", r"/internal/provider_conversation_sync_completions/enqueue"),
    ("complete_conversation_sync", rf"/internal/conversations/{_ID}/complete_conversation_sync"),
    ("report_collect", r"/internal/daily_agent_evaluation_reports/collect"),
    ("report_backfill_preview", r"/internal/daily_agent_evaluation_reports/backfill_preview"),
    ("report_email", r"/internal/daily_agent_evaluation_reports/email"),
)
_COMPILED = tuple((name, re.compile(pattern + r"\Z")) for name, pattern in ROUTES)
COUNTER_CACHE_STEPS = (
    "assignment_queue_memberships",
    "group_employees",
    "employees",
    "credit_usages",
    "conversations",
    "sheet_rows",
    "evaluation_sampling_rule_counters",
)


def rails_error(message: str, error_class: str, *, retryable: bool) -> dict[str, Any]:
    """Rails' error body, as ``Internal::BaseController`` renders a rescued error."""
    return {"error": message, "error_class": error_class, "retryable": retryable}


class RailsServer(ProtocolServer):
    """Rails' internal endpoints on 127.0.0.1.

    Parameters:
      token: the bearer token Rails requires (``RAILS_INTERNAL_TOKEN``).
    """

    def __init__(self, token: str = "rails-internal-token") -> None:
        super().__init__()
        self.token = token
        #: endpoint name -> ids that answer 404 (``"unit21"``: organization data sources).
        self.missing: dict[str, set[int]] = defaultdict(set)
        #: path -> the success body it answers (over the endpoint's default).
        self.results: dict[str, Any] = {}
        #: delivery keys the email endpoint has sent (Rails' claim on its side).
        self.sent_delivery_keys: list[str] = []
        #: called with (conversation id, body) on each successful complete_conversation_sync
        #: (a test applies Rails' effect, e.g. ``conversations.last_synced_at``).
        self.on_complete_sync: Callable[[int, dict[str, Any]], None] | None = None
        #: called with the step on each counter_caches/fix; returns the rows it fixed (a test
        #: applies Rails' repair to the database).
        self.on_counter_fix: Callable[[str], int] | None = None
        self._queued: dict[str, deque[Reply]] = defaultdict(deque)
        self._script_lock = threading.Lock()

    # -- scripting ---------------------------------------------------------------------

    def reply(
        self, path: str, status: int, body: Any, headers: dict[str, str] | None = None
    ) -> None:
        """Answer the next call on ``path`` with exactly this (after auth)."""
        with self._script_lock:
            self._queued[path].append(Reply(status, body, headers or {}))

    def reject(
        self,
        path: str,
        status: int = 422,
        error_class: str = "ActiveRecord::RecordInvalid",
        *,
        retryable: bool = False,
        message: str = "rejected",
        times: int = 1,
    ) -> None:
        """Queue ``times`` Rails error answers on ``path``."""
        for _ in range(times):
            self.reply(path, status, rails_error(message, error_class, retryable=retryable))

    def calls(self, path: str) -> list[Request]:
        """Authorized calls that reached the endpoint on ``path`` (failures included)."""
        return self.requests_to(path)

    # -- protocol ----------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    def status_reply(self, status: int, message: str) -> Reply:
        if status == 401:
            return Reply(401, {"error": "unauthorized"})
        if status == 404:
            return Reply(404, {"error": message, "error_class": "ActiveRecord::RecordNotFound"})
        transient = status >= 500 or status == 429  # a throttle says "later", not "never"
        return Reply(status, rails_error(message, "Internal::Error", retryable=transient))

    def route(self, request: Request) -> Reply:
        if request.method != "POST":
            return Reply(404, {"error": "no route"})
        with self._script_lock:
            queued = self._queued.get(request.path)
            if queued:
                return queued.popleft()
        for name, pattern in _COMPILED:
            match = pattern.match(request.path)
            if match is None:
                continue
            record_id = int(match["id"]) if "id" in match.groupdict() else None
            if record_id is not None and record_id in self.missing[name]:
                return self.status_reply(404, f"Couldn't find record with 'id'={record_id}")
            if request.path in self.results:
                return Reply(200, self.results[request.path])
            answer: Reply = getattr(self, f"_{name}")(request, record_id)
            return answer
        return Reply(404, {"error": "no route"})

    # -- default answers ---------------------------------------------------------------

    def _expired_evaluations(self, request: Request, _id: int | None) -> Reply:
        return Reply(
            200,
            {
                "snapshots": {"candidates": 0, "failures": 0},
                "qa_evaluation_requests": {"candidates": 0, "failures": 0},
            },
        )

    def _unit21(self, request: Request, record_id: int | None) -> Reply:
        return Reply(200, {"organization_data_source_id": record_id, "status": "synced"})

    def _summarize(self, request: Request, record_id: int | None) -> Reply:
        return Reply(200, {"conversation_id": record_id, "status": "summarized"})

    def _counter_caches(self, request: Request, _id: int | None) -> Reply:
        step = (request.body or {}).get("step")
        if step not in COUNTER_CACHE_STEPS:
            return Reply(
                422, rails_error(f"unknown step {step!r}", "ArgumentError", retryable=False)
            )
        fixed = self.on_counter_fix(step) if self.on_counter_fix is not None else 0
        return Reply(200, {"step": step, "fixed": fixed})

    def _upload(self, record_id: int | None, status: str) -> Reply:
        return Reply(200, {"conversation_upload_id": record_id, "status": status})

    def _upload_check(self, request: Request, record_id: int | None) -> Reply:
        return self._upload(record_id, "pending")

    def _upload_process_direct(self, request: Request, record_id: int | None) -> Reply:
        return self._upload(record_id, "completed")

    def _upload_retry_direct(self, request: Request, record_id: int | None) -> Reply:
        return self._upload(record_id, "processing")

    def _upload_mark_failed(self, request: Request, record_id: int | None) -> Reply:
        return self._upload(record_id, "failed")

    def _sync_completion(self, request: Request, _id: int | None) -> Reply:
        return Reply(202, {"accepted": True})

    def _complete_conversation_sync(self, request: Request, record_id: int | None) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        if self.on_complete_sync is not None and record_id is not None:
            self.on_complete_sync(record_id, body)
        return Reply(
            200,
            {
                "conversation_id": record_id,
                "status": "completed",
                "sync_run_id": body.get("sync_run_id"),
            },
        )

    def _report_collect(self, request: Request, _id: int | None) -> Reply:
        return Reply(200, {"rows": []})

    def _report_backfill_preview(self, request: Request, _id: int | None) -> Reply:
        return Reply(200, {"backfill_run_id": None, "status": "none"})

    def _report_email(self, request: Request, _id: int | None) -> Reply:
        key = (request.body or {}).get("delivery_key")
        if not isinstance(key, str) or not key:
            return Reply(
                422, rails_error("delivery_key is required", "ArgumentError", retryable=False)
            )
        with self._script_lock:
            if key in self.sent_delivery_keys:
                return Reply(200, {"status": "already_sent", "delivery_key": key})
            self.sent_delivery_keys.append(key)
        return Reply(200, {"status": "sent", "delivery_key": key})
