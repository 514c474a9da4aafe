"""OpenTelemetry traces, off unless ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set.

=====================================  ========================================================
span                                   made by
=====================================  ========================================================
``POST /internal/jobs/enqueue`` ...    the API (Flask's instrumentation), continuing the
(server)                               caller's ``traceparent`` header
``enqueue <kind>`` (producer)          the router's enqueue; its context travels in the job's
                                       message (``st_trace`` option, a W3C ``traceparent``)
``run <family>`` (consumer)            the worker, around the handler: child of the enqueue's
                                       context and linked to it, so a retry run days later
                                       still points at the enqueue
``GET``/``POST`` provider calls,       the maintained instrumentations of requests, SQLAlchemy
SQL statements, Redis commands         and redis-py, as children of the span in progress
=====================================  ========================================================

A span with no parent is kept only when it is one of the above (server, producer or
consumer): a worker's idle polls and the scheduler's lock renewals make Redis commands no one
asked to trace. Spans leave in batches over OTLP/HTTP (``<endpoint>/v1/traces``); the
standard ``OTEL_*`` variables (headers, batch sizes) apply. Without the endpoint nothing here
is imported and the middleware is not installed: no cost.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

log = logging.getLogger(__name__)

#: The message option carrying the enqueue's ``traceparent``.
TRACE_OPTION = "st_trace"
TRACER = "speedtier"
_configured = False


def configure_tracing(
    endpoint: str | None,
    *,
    component: str,
    exporter: SpanExporter | None = None,
) -> bool:
    """Install the tracer provider and the instrumentations when ``endpoint`` (or, in tests,
    an ``exporter``) is given; returns whether tracing is on. Once per process: a second call
    only answers."""
    global _configured
    if _configured:
        return True
    if not endpoint and exporter is None:
        return False
    from opentelemetry import trace
    from opentelemetry.instrumentation.redis import RedisInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        assert endpoint is not None
        processor: Any = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces")
        )
    else:
        processor = SimpleSpanProcessor(exporter)
    resource = Resource.create({"service.name": "speedtier", "speedtier.component": component})
    provider = TracerProvider(resource=resource, sampler=_own_roots_sampler())
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    RequestsInstrumentor().instrument()
    RedisInstrumentor().instrument()
    SQLAlchemyInstrumentor().instrument()
    _configured = True
    log.info("tracing: spans exported %s", f"to {endpoint}" if endpoint else "in process")
    return True


def is_on() -> bool:
    return _configured


def tracer() -> Tracer:
    from opentelemetry import trace

    return trace.get_tracer(TRACER)


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the span in progress, or None."""
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier.get("traceparent")


def context_of(traceparent: str | None) -> Context | None:
    """The context a ``traceparent`` names (None when absent or unreadable)."""
    if not traceparent:
        return None
    from opentelemetry.propagate import extract
    from opentelemetry.trace import get_current_span

    context = extract({"traceparent": traceparent})
    return context if get_current_span(context).get_span_context().is_valid else None


def _own_roots_sampler() -> Any:
    from opentelemetry.sdk.trace.sampling import (
        ALWAYS_OFF,
        ALWAYS_ON,
        Decision,
        ParentBased,
        Sampler,
        SamplingResult,
    )
    from opentelemetry.trace import SpanKind

    class OwnRoots(Sampler):
        """Root spans: only servers, producers and consumers (the spans of the table)."""

        def should_sample(
            self,
            parent_context: Context | None,
            trace_id: int,
            name: str,
            kind: SpanKind | None = None,
            attributes: Mapping[str, Any] | None = None,
            links: Sequence[Any] | None = None,
            trace_state: Any = None,
        ) -> SamplingResult:
            ours = kind in (SpanKind.SERVER, SpanKind.PRODUCER, SpanKind.CONSUMER)
            decision = Decision.RECORD_AND_SAMPLE if ours else Decision.DROP
            return SamplingResult(decision, attributes if ours else None)

        def get_description(self) -> str:
            return "OwnRoots"

    return ParentBased(
        root=OwnRoots(), remote_parent_sampled=ALWAYS_ON, remote_parent_not_sampled=ALWAYS_OFF
    )
