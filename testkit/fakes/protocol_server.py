"""The HTTP machinery every provider fake shares: a threaded server and failure injection.

A fake subclasses :class:`ProtocolServer`, answers :meth:`~ProtocolServer.route` with a
:class:`Reply`, and says who is :meth:`~ProtocolServer.authorized`. Tests use it as a
context manager that yields its base URL, and make any path misbehave on demand::

    server = NotionServer(token="secret")
    with server as base_url:
        server.fail("/v1/search", "429", retry_after=30, after=1)  # the second page

Failure kinds:

``"404"``, ``"500"``, ``"503"``, ``"529"``, ``"429"`` (with ``retry_after``: a Retry-After
header; without: none)
  a status with the provider's error body (``status_reply``).
``"truncated"``
  the normal answer, but its Content-Length promises more than the body holds and the
  connection closes half-way.
``"slow"``
  the normal answer after ``delay`` seconds (longer than the client's timeout).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from shared.errors import Delay, JobError, Retryable

FAILURE_KINDS = ("404", "429", "500", "503", "529", "truncated", "slow")

#: Failures a client must treat as transient: (id, kind, ``fail`` keywords, error raised).
#: "slow" assumes a client timeout well under its delay.
TRANSIENT_FAILURES: tuple[tuple[str, str, dict[str, Any], type[JobError]], ...] = (
    ("429-retry-after", "429", {"retry_after": 30}, Delay),
    ("429-no-retry-after", "429", {}, Retryable),
    ("500", "500", {}, Retryable),
    ("truncated", "truncated", {}, Retryable),
    ("timeout", "slow", {"delay": 3.0}, Retryable),
)


@dataclass(frozen=True)
class Request:
    """One request as the fake saw it."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    body: Any = None

    def param(self, name: str, default: str | None = None) -> str | None:
        values = self.query.get(name)
        return values[0] if values else default


@dataclass(frozen=True)
class Reply:
    """A JSON answer (``body`` as bytes: sent as is, with the ``Content-Type`` header given)."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Failure:
    """A misbehaviour for requests on one path: skip ``after`` matches, then ``times``."""

    path: str
    kind: str
    method: str | None = None
    times: int = 1
    after: int = 0
    retry_after: str | None = None
    delay: float = 5.0
    seen: int = 0

    def take(self, request: Request) -> bool:
        """True when this request should misbehave (and count it)."""
        if request.path != self.path or self.method not in (None, request.method):
            return False
        self.seen += 1
        return self.after < self.seen <= self.after + self.times


class ProtocolServer:
    """An in-memory provider API on 127.0.0.1, served from a daemon thread."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        #: Exceptions the fake itself raised while answering (reported when it stops).
        self.errors: list[Exception] = []
        self._failures: list[Failure] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- what a provider fake supplies -------------------------------------------------

    def authorized(self, request: Request) -> bool:
        raise NotImplementedError

    def route(self, request: Request) -> Reply:
        raise NotImplementedError

    def status_reply(self, status: int, message: str) -> Reply:
        """The provider's error body for ``status``."""
        return Reply(status, {"status": status, "message": message})

    # -- what tests use ----------------------------------------------------------------

    def fail(
        self,
        path: str,
        kind: str,
        *,
        method: str | None = None,
        times: int = 1,
        after: int = 0,
        retry_after: float | str | None = None,
        delay: float = 5.0,
    ) -> None:
        """Make requests on ``path`` misbehave: the ``after+1``-th to ``after+times``-th."""
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}; one of {FAILURE_KINDS}")
        header = None if retry_after is None else str(retry_after)
        with self._lock:
            self._failures.append(
                Failure(path, kind, method, times, after, retry_after=header, delay=delay)
            )

    def requests_to(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("server not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> str:
        self._httpd = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=type(self).__name__,
            daemon=True,
        )
        self._thread.start()
        return self.base_url

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.errors and exc_type is None:
            raise AssertionError(f"{type(self).__name__} crashed: {self.errors!r}")

    # -- dispatch ----------------------------------------------------------------------

    def _failure_for(self, request: Request) -> Failure | None:
        with self._lock:
            self.requests.append(request)
            for failure in self._failures:
                if failure.take(request):
                    return failure
        return None

    def _answer(self, request: Request) -> Reply:
        if not self.authorized(request):
            return self.status_reply(401, "unauthorized")
        return self.route(request)

    def sleep(self, seconds: float) -> None:
        """Sleep, but wake up when the server stops."""
        self._stopping.wait(seconds)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that hang up (timeouts, truncated bodies) are expected here."""


def _handler_for(fake: ProtocolServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in separate writes

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``fake.requests`` instead."""

        def _serve(self) -> None:
            try:
                request = self._read_request()
                failure = fake._failure_for(request)
                if failure is None:
                    self._send(fake._answer(request))
                elif failure.kind == "slow":
                    fake.sleep(failure.delay)
                    self._send(fake._answer(request))
                elif failure.kind == "truncated":
                    self._send_truncated(fake._answer(request))
                else:
                    status = int(failure.kind)
                    reply = fake.status_reply(status, f"injected {status}")
                    headers = dict(reply.headers)
                    if failure.retry_after is not None:
                        headers["Retry-After"] = failure.retry_after
                    self._send(Reply(status, reply.body, headers))
            except (ConnectionError, TimeoutError, OSError):
                self.close_connection = True
            except Exception as exc:  # a bug in the fake: answer 500, fail the test on exit
                fake.errors.append(exc)
                self._send(Reply(500, {"message": f"fake crashed: {exc!r}"}))

        def _read_request(self) -> Request:
            split = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            return Request(
                method=self.command,
                path=split.path,
                query=parse_qs(split.query, keep_blank_values=True),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=body,
            )

        def _send(self, reply: Reply) -> None:
            raw = isinstance(reply.body, bytes)  # file content: sent as is
            data = reply.body if raw else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            if not raw or "Content-Type" not in reply.headers:
                self.send_header(
                    "Content-Type", "application/octet-stream" if raw else "application/json"
                )
            self.send_header("Content-Length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _send_truncated(self, reply: Reply) -> None:
            data = json.dumps(reply.body).encode()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data) + 512))
            self.end_headers()
            self.wfile.write(data[: max(1, len(data) // 2)])
            self.wfile.flush()
            self.close_connection = True

    return Handler


def iso(epoch: float) -> str:
    """An RFC 3339 UTC timestamp as the providers write them."""
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(epoch))
