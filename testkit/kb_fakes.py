"""The knowledge-sync scenario's providers (``testkit.kb_scenario``): the Notion fake made to
accept one token per organization and to log who asked what, and a crawlable website on a
loopback host of its own, logging every request."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def tenant_notion_class() -> type[Any]:
    from testkit.fakes.notion_server import NotionServer

    class TenantNotion(NotionServer):
        """The Notion fake, accepting one token per organization and logging every
        authorized request as ``(epoch seconds, token, method, path)``."""

        def __init__(self, tokens: Sequence[str]) -> None:
            super().__init__(token=tokens[0])
            self.tokens = frozenset(tokens)
            self.log: list[tuple[float, str, str, str]] = []

        def authorized(self, request: Any) -> bool:
            header = request.headers.get("authorization", "")
            return header.startswith("Bearer ") and header[7:] in self.tokens

        def route(self, request: Any) -> Any:
            token = request.headers["authorization"][7:]
            self.log.append((time.time(), token, request.method, request.path))
            return super().route(request)

    return TenantNotion


def site_page(index: int, pages: int) -> str:
    """Page ``index`` of a ``pages``-page site: a tree (links to ``2i+1`` and ``2i+2``), a
    cross link, and links the crawler must not follow (another host, mailto, javascript,
    nofollow). Page 0 also links a page robots.txt disallows."""
    children = "".join(
        f'<li><a href="/page/{c}">Child {c}</a></li>'
        for c in (2 * index + 1, 2 * index + 2)
        if c < pages
    )
    cross = (index * 7 + 3) % pages
    private = '<a href="/private/members">members</a>' if index == 0 else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Page {index} | Docs</title></head>
<body><nav><a href="/page/0">Home</a></nav>
<main><h1>Article {index}</h1>
<p>Article {index} explains topic {index % 17} in some detail. {"Lorem ipsum. " * 20}</p>
<ul>{children}</ul>
<p>See also <a href="/page/{cross}#section">article {cross}</a>,
<a href="https://external.example/page/{index}">elsewhere</a>,
<a href="mailto:docs@example.com">mail</a>, <a href="javascript:void(0)">script</a>,
<a href="/nofollow/{index}" rel="nofollow">not followed</a> {private}</p>
</main></body></html>"""


class Site:
    """A website on ``host`` (a loopback address), logging ``(epoch seconds, path)``."""

    def __init__(self, host: str, pages: int) -> None:
        self.host = host
        self.pages = pages
        self.log: list[tuple[float, str]] = []
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self._server.server_address[1]}/page/0"

    def start(self) -> Site:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                site.log.append((time.time(), self.path))
                path = self.path.split("?", 1)[0]
                if path == "/robots.txt":
                    self._send(200, "text/plain", "User-agent: *\nDisallow: /private/\n")
                elif (
                    path.startswith("/page/") and path[6:].isdigit() and int(path[6:]) < site.pages
                ):
                    self._send(
                        200, "text/html; charset=utf-8", site_page(int(path[6:]), site.pages)
                    )
                else:
                    self._send(404, "text/html", "<h1>not found</h1>")

            def _send(self, status: int, content_type: str, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(data)

        return Handler
