"""A real website on 127.0.0.1 for crawler tests: pages, robots.txt, redirects, failures.

``with FakeWebsite(pages=12) as site:`` serves, on an ephemeral port, until the block ends:

=================================  =========================================================
path                               answer
=================================  =========================================================
``/robots.txt``                    ``robots`` (default disallows ``/private/``), or
                                   ``robots_status`` (404, 500...) with no rules
``/page/<i>``                      page i: tree links to pages 2i+1 and 2i+2, a cross link,
                                   relative, fragment, external-host, mailto and javascript
                                   links, a disallowed link, script/style/nav boilerplate
``/private/<x>``                   a page robots.txt forbids
``/redirect/<n>``                  a chain of n redirects ending at ``/page/1``
``/redirect-loop``                 redirects to itself
``/redirect-to?url=<u>``           redirects to any URL (private or another host)
``/plain.txt``, ``/doc.md``        text/plain and text/markdown
``/file.pdf``                      application/pdf
``/huge``                          text/html streamed past 10 MB, generated chunk by chunk
``/huge-declared``                 Content-Length over 10 MB, a short body
``/slow``                          answers after ``slow_seconds``
``/missing``, ``/error``           404, 500
``/rate-limited``                  429 with Retry-After: 30; ``/rate-limited-bare`` without
=================================  =========================================================

``site.requests`` lists the paths asked for, in order, so tests can assert what was never
fetched.
"""

from __future__ import annotations

import contextlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from urllib.parse import parse_qs, urlsplit

DEFAULT_ROBOTS = "User-agent: *\nDisallow: /private/\n"
HUGE_BYTES = 11 * 1024 * 1024
SCRIPT_MARKER = "SCRIPT-MARKER-must-not-appear"
STYLE_MARKER = "STYLE-MARKER-must-not-appear"
NAV_MARKER = "NAV-MARKER-must-not-appear"


def page_html(index: int, pages: int) -> str:
    """Page ``index`` of a site of ``pages`` pages."""
    children = [c for c in (2 * index + 1, 2 * index + 2) if c < pages]
    cross = (index * 7 + 3) % pages
    items = "".join(f'<li><a href="/page/{c}">Child {c}</a></li>' for c in children)
    og = f'<meta property="og:title" content="Open Graph {index}">' if index % 2 else ""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Page {index} | Fake site</title>{og}
<style>.{STYLE_MARKER} {{ color: red }}</style>
<script>window.marker = "{SCRIPT_MARKER}";</script></head>
<body>
<header><a href="/page/0">Home</a> site header</header>
<nav><a href="/page/{cross}">{NAV_MARKER}</a> <a href="/page/0#top">Top</a></nav>
<main>
<h1>Heading {index}</h1>
<p>Body of page {index} with <strong>bold</strong> text and
<a href="../page/{cross}?ref=cross#frag">a relative cross link</a>.</p>
<ul>{items}</ul>
<p><a href="https://external.example/page/{index}">external</a>
<a href="mailto:someone@example.com">mail</a>
<a href="javascript:void(0)">script link</a>
<a href="/private/secret-{index}">private</a>
<a href="/page/{index}">self</a>
<a href="/nofollow" rel="nofollow">no follow</a></p>
<script>document.write("{SCRIPT_MARKER}")</script>
</main>
<footer>footer text</footer>
</body></html>"""


class FakeWebsite:
    """A threaded HTTP server serving the fake site on ``127.0.0.1``, port chosen by the OS.

    Parameters:
      pages: how many ``/page/<i>`` pages exist.
      robots: the robots.txt text served with 200.
      robots_status: when not 200, robots.txt answers this status with an empty body.
      slow_seconds: how long ``/slow`` waits before answering.
      page_seconds: how long each ``/page/<i>`` waits before answering (a real site's
        latency, for benchmarks); may be changed while the site serves.
    """

    def __init__(
        self,
        pages: int = 12,
        *,
        robots: str = DEFAULT_ROBOTS,
        robots_status: int = 200,
        slow_seconds: float = 2.0,
        page_seconds: float = 0.0,
    ) -> None:
        self.pages = pages
        self.page_seconds = page_seconds
        self.robots = robots
        self.robots_status = robots_status
        self.slow_seconds = slow_seconds
        self.requests: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def requested(self, path_prefix: str) -> list[str]:
        with self._lock:
            return [p for p in self.requests if p.startswith(path_prefix)]

    def record(self, path: str) -> None:
        with self._lock:
            self.requests.append(path)

    def __enter__(self) -> FakeWebsite:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler(site: FakeWebsite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

        def do_GET(self) -> None:
            site.record(self.path)
            parts = urlsplit(self.path)
            path = parts.path
            if path == "/robots.txt":
                if site.robots_status != 200:
                    self._send(site.robots_status, "text/plain", b"")
                else:
                    self._send(200, "text/plain", site.robots.encode())
            elif path.startswith("/page/") and path[6:].isdigit() and int(path[6:]) < site.pages:
                if site.page_seconds > 0:
                    time.sleep(site.page_seconds)
                self._send(200, "text/html; charset=utf-8", page_html(int(path[6:]), site.pages))
            elif path.startswith("/private/"):
                self._send(200, "text/html", b"<title>secret</title><p>secret</p>")
            elif path.startswith("/redirect/") and path[10:].isdigit():
                left = int(path[10:])
                self._redirect("/page/1" if left <= 1 else f"/redirect/{left - 1}")
            elif path == "/redirect-loop":
                self._redirect("/redirect-loop")
            elif path == "/redirect-to":
                self._redirect(parse_qs(parts.query)["url"][0])
            elif path == "/plain.txt":
                self._send(200, "text/plain; charset=utf-8", "Just text.\nSecond line.\n")
            elif path == "/doc.md":
                self._send(200, "text/markdown", "# Markdown title\n\nSome *markdown*.\n")
            elif path == "/file.pdf":
                self._send(200, "application/pdf", b"%PDF-1.4 not really")
            elif path == "/huge":
                self._stream_huge()
            elif path == "/huge-declared":
                self._send(200, "text/html", b"<p>short</p>", length=HUGE_BYTES)
            elif path == "/slow":
                time.sleep(site.slow_seconds)
                self._send(200, "text/html", b"<p>late</p>")
            elif path == "/error":
                self._send(500, "text/plain", b"boom")
            elif path == "/rate-limited":
                self._send(429, "text/plain", b"slow down", headers={"Retry-After": "30"})
            elif path == "/rate-limited-bare":
                self._send(429, "text/plain", b"slow down")
            else:
                self._send(404, "text/html", b"<h1>not found</h1>")

        def _send(
            self,
            status: int,
            content_type: str,
            body: str | bytes,
            *,
            length: int | None = None,
            headers: dict[str, str] | None = None,
        ) -> None:
            data = body.encode() if isinstance(body, str) else body
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data) if length is None else length))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        def _redirect(self, location: str) -> None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _stream_huge(self) -> None:
            # No Content-Length: the body ends when the connection closes (HTTP/1.0).
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            chunk = b"<p>" + b"x" * (64 * 1024 - 7) + b"</p>\n"
            sent = 0
            try:
                while sent < HUGE_BYTES:
                    self.wfile.write(chunk)
                    sent += len(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler
