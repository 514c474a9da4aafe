"""Job traces: the enqueue's context rides in the message, the run is a span of it.

=====================  ==========================================================================
hook                   what it does
=====================  ==========================================================================
``before_enqueue``     a first enqueue: a producer span ``enqueue <actor>`` under the span in
                       progress (the API request continuing Rails' ``traceparent``, a tick's
                       run), its ``traceparent`` kept in the ``st_trace`` option; a retry's or a
                       delay's re-enqueue keeps the option it has
``before_process_``    a consumer span ``run <actor>``: child of ``st_trace`` and linked to it,
``message``            current while the handler runs, so its HTTP, SQL and Redis calls are its
                       children
``after_process_``     the span ends (an exception recorded, status error); a skipped message
``message`` / ``skip`` ends it too
=====================  ==========================================================================

Installed only when tracing is on (``shared.tracing``); without it no hook exists and the
broker calls none (``tiers.hooks``).
"""

from __future__ import annotations

import threading
from typing import Any

from dramatiq import Broker, Message, Middleware
from dramatiq.broker import MessageProxy

from shared import tracing
from tiers.options import JOB_ID


class JobTracing(Middleware):
    def __init__(self) -> None:
        self._running: dict[str, tuple[Any, object]] = {}
        self._lock = threading.Lock()

    def before_enqueue(self, broker: Broker, message: Message[Any], delay: int | None) -> None:
        if message.options.get(tracing.TRACE_OPTION):
            return
        from opentelemetry.trace import SpanKind

        attributes = {
            "messaging.system": "dramatiq",
            "messaging.destination.name": message.queue_name,
            "speedtier.job_id": str(message.options.get(JOB_ID, "")),
        }
        with tracing.tracer().start_as_current_span(
            f"enqueue {message.actor_name}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            traceparent = tracing.current_traceparent()
        if traceparent:
            message.options[tracing.TRACE_OPTION] = traceparent

    def before_process_message(self, broker: Broker, message: MessageProxy) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Link, SpanKind

        parent = tracing.context_of(message.options.get(tracing.TRACE_OPTION))
        links = [Link(trace.get_current_span(parent).get_span_context())] if parent else []
        span = tracing.tracer().start_span(
            f"run {message.actor_name}",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": "dramatiq",
                "messaging.destination.name": message.queue_name,
                "speedtier.job_id": str(message.options.get(JOB_ID, "")),
            },
        )
        token = context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._running[message.message_id] = (span, token)

    def after_process_message(
        self,
        broker: Broker,
        message: MessageProxy,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        self._end(message, exception)

    def after_skip_message(self, broker: Broker, message: MessageProxy) -> None:
        self._end(message, None)

    def _end(self, message: MessageProxy, exception: BaseException | None) -> None:
        with self._lock:
            running = self._running.pop(message.message_id, None)
        if running is None:
            return
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        span, token = running
        if exception is not None:
            span.record_exception(exception)
            span.set_status(Status(StatusCode.ERROR, type(exception).__name__))
        span.end()
        context.detach(token)  # type: ignore[arg-type]
