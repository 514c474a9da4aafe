"""A local HTTP server speaking the Zendesk Help Center API, failures included.

It serves brands, help center locales, categories, nested sections, articles (drafts too; all
of them in their source locale at ``/articles``, or those with a translation in a locale at
``/{locale}/articles``, each in that locale) and their translations, checks basic auth
(``{email}/token:{api_token}``, else 401), and paginates
like Zendesk: cursor pagination (``page[size]``, ``page[after]``, ``meta.has_more``,
``links.next``) when ``page[size]`` is asked for, offset pagination (``page``, ``per_page``,
``next_page``) otherwise or when ``cursor_pagination`` is off. Pages hold at most
``page_size`` items, whatever the client asks.

Brands share the server's host, so a brand other than the default one answers under the
path prefix ``/brand/<id>``, which is also its ``brand_url``.

Failures are injected per path (and page) with :meth:`FakeZendesk.fail`; see :class:`Kind`.

Draft is per translation, as in Zendesk: an article's ``draft`` is "true if the translation
for the current locale is a draft" (the source locale's when no locale is in the path), so
an article whose source translation is a draft may have published translations. A brand's
``help_center_state`` is ``enabled``, ``disabled`` or ``restricted`` (only signed-in users
see it; the API answers an agent's credentials as usual).

References: https://developer.zendesk.com/api-reference/help_center/help-center-api/articles/,
https://developer.zendesk.com/api-reference/help_center/help-center-api/translations/,
https://developer.zendesk.com/api-reference/ticketing/account-configuration/brands/,
https://developer.zendesk.com/api-reference/introduction/pagination/,
https://developer.zendesk.com/api-reference/introduction/rate-limits/ (429 + Retry-After).

    fake = FakeZendesk(sample_help_center())
    with fake as base_url:
        fake.fail_articles(Kind.SERVER_ERROR, page="later")
"""

from __future__ import annotations

import base64
import json
import re
import sys
import threading
from dataclasses import dataclass
from enum import Enum
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from testkit.fakes.zendesk_help_center import (
    Brand,
    HelpCenter,
    article_json,
    localized,
    translation_json,
)

EMAIL = "agent@example.com"
API_TOKEN = "token-123"


class Kind(Enum):
    """What an injected failure answers."""

    NOT_FOUND = "404"
    UNAUTHORIZED = "401"
    RATE_LIMITED = "429 with Retry-After"
    RATE_LIMITED_BARE = "429 without Retry-After"
    SERVER_ERROR = "500"
    TRUNCATED = "truncated JSON (Content-Length larger than the body)"
    INVALID_JSON = "invalid JSON"
    SLOW = "slow (answers after slow_seconds)"


@dataclass
class Failure:
    path: str
    kind: Kind
    page: int | str | None = None
    times: int | None = None
    retry_after: int = 30

    def matches(self, path: str, page: int) -> bool:
        if self.path != path or self.times == 0:
            return False
        if self.page == "first":
            return page == 1
        if self.page == "later":
            return page > 1
        return self.page is None or self.page == page


class FakeZendesk:
    """The server's state; entering it starts the server and gives its base URL.

    Parameters:
      help_center: the default brand's help center.
      page_size: the largest page served.
      cursor_pagination: False answers every list with offset pagination.
      slow_seconds: how long a ``Kind.SLOW`` answer waits.
    """

    def __init__(
        self,
        help_center: HelpCenter,
        *,
        brands: list[Brand] | None = None,
        page_size: int = 3,
        cursor_pagination: bool = True,
        slow_seconds: float = 2.0,
        email: str = EMAIL,
        api_token: str = API_TOKEN,
    ) -> None:
        self.brands = brands or [Brand(1, "Acme", "acme")]
        self.help_centers: dict[int, HelpCenter] = {self.brands[0].id: help_center}
        self.page_size = page_size
        self.cursor_pagination = cursor_pagination
        self.slow_seconds = slow_seconds
        self.authorization = "Basic " + base64.b64encode(
            f"{email}/token:{api_token}".encode()
        ).decode("ascii")
        self.failures: list[Failure] = []
        self.requests: list[str] = []
        self.base_url = ""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None

    # -- setup ---------------------------------------------------------------------------

    def add_brand(self, brand: Brand, help_center: HelpCenter | None = None) -> None:
        self.brands.append(brand)
        if help_center is not None:
            self.help_centers[brand.id] = help_center

    def brand_url(self, brand: Brand) -> str:
        if brand.id == self.brands[0].id:
            return self.base_url
        return f"{self.base_url}/brand/{brand.id}"

    def fail(
        self,
        path: str,
        kind: Kind,
        *,
        page: int | str | None = None,
        times: int | None = None,
        retry_after: int = 30,
    ) -> None:
        """Answer ``path`` (no query) with ``kind``: on every page, on ``"first"``,
        ``"later"`` or a page number; ``times`` times or for good."""
        with self._lock:
            self.failures.append(Failure(path, kind, page, times, retry_after))

    def fail_articles(
        self, kind: Kind, *, page: int | str | None = "first", locale: str | None = "en-us"
    ) -> None:
        """Fail pages of the article list of ``locale`` (None: the source-locale list)."""
        path = (
            f"/api/v2/help_center/{locale}/articles" if locale else "/api/v2/help_center/articles"
        )
        self.fail(path, kind, page=page)

    def fail_translations(self, article_id: int, kind: Kind) -> None:
        self.fail(f"/api/v2/help_center/articles/{article_id}/translations", kind)

    def requested(self, path: str) -> list[str]:
        """The requests (path and query) made to ``path``."""
        with self._lock:
            return [r for r in self.requests if r.split("?")[0] == path]

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> str:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self.base_url

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # -- answering -----------------------------------------------------------------------

    def answer(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        help_center, prefix, path = self._route(path)
        if help_center is None:
            return 404, {"error": "RecordNotFound"}
        if path == "/api/v2/brands":
            brands = [self._brand_json(b) for b in self.brands]
            return 200, self._page(brands, "brands", prefix + path, query)
        if path == "/api/v2/help_center/locales":
            return 200, {
                "locales": help_center.locales,
                "default_locale": help_center.default_locale,
            }
        parts = path.removeprefix("/api/v2/help_center/").split("/")
        if len(parts) == 2 and parts[1] in ("categories", "sections", "articles"):
            items = localized(help_center, parts[0], parts[1])
            return 200, self._page(items, parts[1], prefix + path, query)
        if len(parts) == 1 and parts[0] in ("categories", "sections"):
            # Agents may omit the locale: the help center's default locale answers.
            items = localized(help_center, help_center.default_locale, parts[0])
            return 200, self._page(items, parts[0], prefix + path, query)
        if parts[0] != "articles":
            return 404, {"error": "RecordNotFound"}
        if len(parts) == 1:
            items = [article_json(a) for a in help_center.articles]
            return 200, self._page(items, "articles", prefix + path, query)
        article = next((a for a in help_center.articles if str(a.id) == parts[1]), None)
        if article is None:
            return 404, {"error": "RecordNotFound"}
        if len(parts) == 2:
            return 200, {"article": article_json(article)}
        translations = [translation_json(article, t) for t in article.translations]
        if len(parts) == 3 and parts[2] == "translations":
            return 200, self._page(translations, "translations", prefix + path, query)
        if len(parts) == 4 and parts[2] == "translations":
            found = next((t for t in translations if t["locale"] == parts[3]), None)
            return (200, {"translation": found}) if found else (404, {"error": "RecordNotFound"})
        return 404, {"error": "RecordNotFound"}

    def failure_for(self, path: str, query: dict[str, str]) -> Failure | None:
        page = self._page_number(query)
        with self._lock:
            for failure in self.failures:
                if failure.matches(path, page):
                    if failure.times is not None:
                        failure.times -= 1
                    return failure
        return None

    def _route(self, path: str) -> tuple[HelpCenter | None, str, str]:
        """The help center a path addresses, the brand prefix, and the path under it."""
        match = re.match(r"^(/brand/(\d+))(/.*)$", path)
        if match is None:
            return self.help_centers.get(self.brands[0].id), "", path
        return self.help_centers.get(int(match.group(2))), match.group(1), match.group(3)

    def _size(self, query: dict[str, str]) -> int:
        asked = query.get("page[size]") or query.get("per_page") or self.page_size
        return max(1, min(int(asked), self.page_size))

    def _page_number(self, query: dict[str, str]) -> int:
        if "page[after]" in query:
            return int(json.loads(base64.urlsafe_b64decode(query["page[after]"]))["page"])
        return int(query.get("page", 1))

    def _page(
        self, items: list[dict[str, Any]], key: str, path: str, query: dict[str, str]
    ) -> dict[str, Any]:
        size, number = self._size(query), self._page_number(query)
        chunk = items[(number - 1) * size : number * size]
        more = number * size < len(items)
        url = f"{self.base_url}{path}"
        if self.cursor_pagination and "page[size]" in query:
            cursor = base64.urlsafe_b64encode(json.dumps({"page": number + 1}).encode()).decode()
            following = f"{url}?{urlencode({'page[size]': size, 'page[after]': cursor})}"
            return {
                key: chunk,
                "meta": {"has_more": more, "after_cursor": cursor if more else None},
                "links": {"next": following if more else None},
            }
        following = f"{url}?{urlencode({'page': number + 1, 'per_page': size})}"
        return {
            key: chunk,
            "next_page": following if more else None,
            "page": number,
            "per_page": size,
            "count": len(items),
        }

    def _brand_json(self, brand: Brand) -> dict[str, Any]:
        return {
            "id": brand.id,
            "name": brand.name,
            "subdomain": brand.subdomain,
            "brand_url": self.brand_url(brand),
            "has_help_center": brand.has_help_center,
            "help_center_state": brand.help_center_state,
            "active": brand.active,
        }


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is part of the test, not a server fault.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeZendesk

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        fake = self.fake
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        with fake._lock:
            fake.requests.append(self.path)
        if self.headers.get("Authorization") != fake.authorization:
            self._send(401, {"error": "Couldn't authenticate you"})
            return
        # Zendesk answers every path with or without ".json" (SDKs such as zenpy add it).
        path = parts.path.removesuffix(".json")
        failure = fake.failure_for(path, query)
        if failure is None:
            self._send(*fake.answer(path, query))
            return
        kind = failure.kind
        if kind is Kind.SLOW:
            fake._stopping.wait(fake.slow_seconds)
            self._send(*fake.answer(path, query))
        elif kind is Kind.RATE_LIMITED:
            self._send(429, {"error": "TooManyRequests"}, {"Retry-After": str(failure.retry_after)})
        elif kind in (Kind.NOT_FOUND, Kind.UNAUTHORIZED, Kind.RATE_LIMITED_BARE, Kind.SERVER_ERROR):
            status = int(kind.value.split()[0])
            self._send(status, {"error": kind.name})
        else:
            _, body = fake.answer(path, query)
            raw = json.dumps(body).encode()
            if kind is Kind.TRUNCATED:
                self._send_raw(200, raw[: len(raw) // 2], length=len(raw))
            else:
                self._send_raw(200, raw[: len(raw) // 2])

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(body).encode(), headers=headers)

    def _send_raw(
        self,
        status: int,
        raw: bytes,
        *,
        length: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(raw) if length is None else length))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
