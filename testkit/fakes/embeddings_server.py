"""A local server speaking OpenAI's embeddings API, with failures on demand.

``POST /v1/embeddings`` takes ``{"model", "input": str | [str, ...]}`` with a bearer key and
answers ``{"object": "list", "data": [{"object": "embedding", "index", "embedding"}],
"model", "usage"}``. Vectors are deterministic per text (see :func:`vector_for`). Queue
failures with :meth:`EmbeddingsServer.fail_next`; each applies to one request.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

UNAUTHORIZED = "unauthorized"  # 401 with OpenAI's error body
RATE_LIMITED = "rate_limited"  # 429 with Retry-After
RATE_LIMITED_NO_RETRY_AFTER = "rate_limited_no_retry_after"  # 429 without it
SERVER_ERROR = "server_error"  # 500
TRUNCATED = "truncated"  # Content-Length promises more than is sent, then the socket closes
INVALID_JSON = "invalid_json"  # 200 with a body that is not JSON
SLOW = "slow"  # answers correctly after ``slow_seconds``
WRONG_COUNT = "wrong_count"  # 200 with one vector fewer than inputs


def vector_for(text: str, dimensions: int) -> list[float]:
    """The deterministic vector the server returns for ``text``."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(digest[i % len(digest)] - 128) / 128.0 for i in range(dimensions)]


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    payload: Any


@dataclass
class EmbeddingsServer:
    """The fake provider's state; tests read ``requests`` and queue failures."""

    api_key: str = "sk-test"
    dimensions: int = 8
    retry_after: str = "7"
    slow_seconds: float = 1.0
    reverse_order: bool = False
    requests: list[RecordedRequest] = field(default_factory=list)
    _failures: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    base_url: str = ""

    def fail_next(self, *failures: str) -> None:
        """Apply these failure modes, in order, to the next requests."""
        with self._lock:
            self._failures.extend(failures)

    def _next_failure(self) -> str | None:
        with self._lock:
            return self._failures.pop(0) if self._failures else None

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    @property
    def input_batches(self) -> list[list[str]]:
        return [list(r.payload["input"]) for r in self.requests if isinstance(r.payload, dict)]


def _handler(server: EmbeddingsServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = None
            server._record(RecordedRequest(self.path, dict(self.headers.items()), payload))
            if self.path.rstrip("/") != "/v1/embeddings":
                return self._json(404, _error("Not found", "invalid_request_error"))
            if self.headers.get("Authorization") != f"Bearer {server.api_key}":
                return self._json(401, _error("Incorrect API key provided", "invalid_api_key"))
            failure = server._next_failure()
            if failure is not None and self._fail(failure):
                return
            if not isinstance(payload, dict) or not payload.get("model"):
                return self._json(400, _error("'model' is required", "invalid_request_error"))
            inputs = payload.get("input")
            if isinstance(inputs, str):
                inputs = [inputs]
            if not isinstance(inputs, list) or not inputs:
                return self._json(400, _error("'input' is invalid", "invalid_request_error"))
            data = [
                {"object": "embedding", "index": i, "embedding": vector_for(t, server.dimensions)}
                for i, t in enumerate(inputs)
            ]
            if failure == WRONG_COUNT:
                data = data[:-1]
            if server.reverse_order:
                data.reverse()
            tokens = sum(len(str(t).split()) for t in inputs)
            body = {
                "object": "list",
                "data": data,
                "model": payload["model"],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
            self._json(200, body)

        def _fail(self, failure: str) -> bool:
            """Answer with ``failure``; False when the request should go on normally."""
            if failure == UNAUTHORIZED:
                self._json(401, _error("Incorrect API key provided", "invalid_api_key"))
            elif failure == RATE_LIMITED:
                self._json(
                    429,
                    _error("Rate limit reached", "rate_limit_exceeded"),
                    {"Retry-After": server.retry_after},
                )
            elif failure == RATE_LIMITED_NO_RETRY_AFTER:
                self._json(429, _error("Rate limit reached", "rate_limit_exceeded"))
            elif failure == SERVER_ERROR:
                self._json(500, _error("The server had an error", "server_error"))
            elif failure == INVALID_JSON:
                self._send(200, b"<html>gateway</html>", "application/json")
            elif failure == TRUNCATED:
                body = b'{"object": "list", "data": [{"object": "embedding", "ind'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body) + 500))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                self.close_connection = True
            elif failure == SLOW:
                server._stopping.wait(server.slow_seconds)
                return False
            else:
                return False
            return True

        def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(body).encode(), "application/json", headers)

        def _send(
            self,
            status: int,
            body: bytes,
            content_type: str,
            headers: dict[str, str] | None = None,
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler


def _error(message: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out closes its socket before a slow answer: not a failure.
        pass


@contextmanager
def running_embeddings_server(**options: Any) -> Iterator[EmbeddingsServer]:
    """Serve on ``127.0.0.1`` at a free port for the ``with`` block; ``base_url`` ends in
    ``/v1``."""
    state = EmbeddingsServer(**options)
    httpd = _QuietServer(("127.0.0.1", 0), _handler(state))
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield state
    finally:
        state._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
