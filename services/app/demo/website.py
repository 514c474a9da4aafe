"""The sample website, served on loopback for the crawler to fetch.

:class:`SampleWebsite` serves ``samples/site/`` (eight pages about an imaginary greenhouse
controller, a ``robots.txt`` and a draft robots.txt keeps out) from a
``ThreadingHTTPServer`` in a daemon thread, on 127.0.0.1 and a free port.
:func:`discover_pages` walks the site's links the way a polite crawler would (same host,
robots.txt honoured), so the demo adds one URL document per published page.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from functools import partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib import robotparser
from urllib.parse import urldefrag, urljoin, urlsplit

import requests

SITE_DIR = Path(__file__).resolve().parent / "samples" / "site"
HOME_PAGE = "index.html"
#: The demo never needs more; a bound keeps a wrong sample from crawling forever.
MAX_PAGES = 50


class _QuietHandler(SimpleHTTPRequestHandler):
    """Static files, without an access log line per request in the demo's output."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class SampleWebsite:
    """The sample site on ``http://127.0.0.1:<port>/``, until :meth:`stop`.

    Parameters:
      directory: the folder served (default: the bundled sample site).
      port: ``0`` (the default) picks a free port.
      port_file: remembers the port between runs: the same port is taken again when it is
        free, so the pages keep their URLs and a restart does not version them anew.
    """

    def __init__(
        self, directory: Path = SITE_DIR, *, port: int = 0, port_file: Path | None = None
    ) -> None:
        handler = partial(_QuietHandler, directory=str(directory))
        self._server = _bind(handler, port, port_file)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="demo-website",
            daemon=True,
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    @property
    def home_url(self) -> str:
        return urljoin(self.base_url, HOME_PAGE)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SampleWebsite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _bind(handler: Any, port: int, port_file: Path | None) -> ThreadingHTTPServer:
    remembered = 0
    if not port and port_file is not None:
        with contextlib.suppress(OSError, ValueError):
            remembered = int(port_file.read_text().strip())
    server = None
    if remembered:
        with contextlib.suppress(OSError):  # taken by something else since: pick another
            server = ThreadingHTTPServer(("127.0.0.1", remembered), handler)
    if server is None:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    if port_file is not None:
        with contextlib.suppress(OSError):
            port_file.parent.mkdir(parents=True, exist_ok=True)
            port_file.write_text(f"{server.server_address[1]}\n")
    return server


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def links_of(html: str, page_url: str) -> list[str]:
    """The absolute, fragment-free targets of the page's ``<a href>`` links, in order."""
    parser = _Links()
    parser.feed(html)
    return [urldefrag(urljoin(page_url, href)).url for href in parser.hrefs]


def discover_pages(
    start_url: str, *, get: Callable[[str], requests.Response] | None = None
) -> tuple[list[str], list[str]]:
    """Walk same-host links from ``start_url``, breadth first.

    Returns:
      ``(pages, disallowed)``: the HTML pages found, in discovery order, and the same-host
      links robots.txt keeps out (not fetched).
    """
    fetch = get or partial(requests.get, timeout=10)
    host = urlsplit(start_url).netloc
    robots = robotparser.RobotFileParser()
    robots.parse(fetch(urljoin(start_url, "/robots.txt")).text.splitlines())
    pages: list[str] = []
    disallowed: list[str] = []
    queue, seen = [start_url], {start_url}
    while queue and len(pages) < MAX_PAGES:
        url = queue.pop(0)
        if not robots.can_fetch("*", url):
            disallowed.append(url)
            continue
        response = fetch(url)
        if response.status_code != 200 or "html" not in response.headers.get("Content-Type", ""):
            continue
        pages.append(url)
        for link in links_of(response.text, url):
            if urlsplit(link).netloc == host and link not in seen:
                seen.add(link)
                queue.append(link)
    return pages, disallowed
