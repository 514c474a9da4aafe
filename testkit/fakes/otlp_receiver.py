"""A local OpenTelemetry collector endpoint: OTLP/HTTP with binary protobuf, traces only.

What it follows (https://opentelemetry.io/docs/specs/otlp/, "OTLP/HTTP"): ``POST /v1/traces``
with ``Content-Type: application/x-protobuf`` and a serialized ``ExportTraceServiceRequest``,
optionally ``Content-Encoding: gzip`` (servers MUST accept it); full success is ``200`` with a
serialized ``ExportTraceServiceResponse`` of the same content type. Any other path answers
404, another content type 415 (the JSON encoding is not spoken here). Decoding uses the
protobuf classes of ``opentelemetry-proto``, the schema the exporter itself encodes with.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

PROTOBUF = "application/x-protobuf"


@dataclass
class ReceivedSpan:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    service: str
    component: str


@dataclass
class TraceInbox:
    spans: list[ReceivedSpan] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def received(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)


def _attribute(attributes: Any, key: str) -> str:
    for attribute in attributes:
        if attribute.key == key:
            return str(attribute.value.string_value)
    return ""


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, TraceInbox]]:
    """Yields ``(endpoint, inbox)``: the base URL to set as OTEL_EXPORTER_OTLP_ENDPOINT and
    the spans received so far."""
    inbox = TraceInbox()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path != "/v1/traces":
                self._answer(404, b"")
                return
            if self.headers.get("Content-Type", "").split(";")[0].strip() != PROTOBUF:
                self._answer(415, b"")
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest.FromString(body)
            with inbox.lock:
                for resource_spans in request.resource_spans:
                    attributes = resource_spans.resource.attributes
                    service = _attribute(attributes, "service.name")
                    component = _attribute(attributes, "speedtier.component")
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            inbox.spans.append(
                                ReceivedSpan(
                                    span.name,
                                    span.kind,
                                    span.trace_id.hex(),
                                    span.span_id.hex(),
                                    span.parent_span_id.hex(),
                                    service,
                                    component,
                                )
                            )
            self._answer(200, ExportTraceServiceResponse().SerializeToString())

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", PROTOBUF)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", inbox
    finally:
        server.shutdown()
        server.server_close()
