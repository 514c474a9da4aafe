"""A local Sentry ingest endpoint: collects the envelopes an SDK posts to it.

Cron check-ins arrive as envelope items of type ``check_in`` whose payload carries
``check_in_id``, ``monitor_slug``, ``status`` (``in_progress``, ``ok``, ``error``) and an
optional ``monitor_config`` (``schedule`` ``{type: crontab, value}``, ``checkin_margin`` and
``max_runtime`` in minutes, ``timezone``): https://develop.sentry.dev/sdk/check-ins/ and
https://docs.sentry.io/product/crons/getting-started/http (upsert through a check-in).
"""

from __future__ import annotations

import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class SentryInbox:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return [item for item in self.items if "level" in item or "exception" in item]

    def checkins(self) -> list[dict[str, Any]]:
        """The check-in payloads received, in order."""
        with self.lock:
            return [item for item in self.items if "monitor_slug" in item and "status" in item]


def _decode(body: bytes, encoding: str | None) -> bytes:
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


@contextmanager
def fake_sentry() -> Iterator[tuple[str, SentryInbox]]:
    """Yields ``(dsn, inbox)``; every JSON line of every posted envelope lands in the inbox."""
    inbox = SentryInbox()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = _decode(self.rfile.read(length), self.headers.get("Content-Encoding"))
            with inbox.lock:
                for line in body.splitlines():
                    try:
                        item = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(item, dict):
                        inbox.items.append(item)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://publickey@127.0.0.1:{server.server_port}/1", inbox
    finally:
        server.shutdown()
        server.server_close()
