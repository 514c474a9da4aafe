"""The enqueue routes Rails' producers call (seed 001).

- ``POST /internal/conversation_summaries/enqueue`` (``summarize_conversation``), called by
  Rails' ``Api2ConversationSummaryEnqueuer``;
- ``POST /internal/counter_caches/enqueue`` (``fix_counter_caches``), called by
  ``Api2CounterCacheFixEnqueuer`` from ``Employee#merge_into!``.

Both are the shared enqueue route: 401 without the token, 400 naming each bad field, 202
with each job's outcome (``added``/``deduplicated``), 503 when Redis cannot take the job. A
non-2xx is Rails' proven delivery error: the summary enqueuer falls back to its retained
``SummarizeConversationJob``; the merge logs and reports it without failing.
"""

from __future__ import annotations

from flask import Blueprint

from services.apikit.enqueue import enqueue_blueprint


def blueprints() -> list[Blueprint]:
    return [
        enqueue_blueprint(
            "conversation_summaries",
            "/internal/conversation_summaries",
            ("summarize_conversation",),
            "Enqueue a conversation summary (Rails' Api2ConversationSummaryEnqueuer)",
        ),
        enqueue_blueprint(
            "counter_caches",
            "/internal/counter_caches",
            ("fix_counter_caches",),
            "Enqueue the counter-cache repair (Rails' Api2CounterCacheFixEnqueuer)",
        ),
    ]
