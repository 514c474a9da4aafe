"""One GET on a connection to an address the SSRF guard checked.

The host is resolved once (:meth:`AddressGuard.resolve`) and the connection is made to the
checked address itself, with the ``Host`` header, SNI and certificate check of the name, so
a second DNS answer cannot point the request elsewhere (no DNS rebinding between check and
connect). Redirects are not followed here (see :mod:`.redirects`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
import urllib3.exceptions

from services.web.ssrf_guard import AddressGuard
from services.web.urls import origin
from shared.errors import Retryable

DEFAULT_USER_AGENT = "speedtier-crawler"
_MAX_ADDRESSES_TRIED = 4


class _PinnedTLSAdapter(requests.adapters.HTTPAdapter):
    """Connects to an address but verifies the certificate of (and sends SNI for) a name."""

    def __init__(self, hostname: str) -> None:
        self._hostname = hostname  # read by init_poolmanager, which __init__ calls
        super().__init__(max_retries=0)

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        pool_kwargs.update(server_hostname=self._hostname, assert_hostname=self._hostname)
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)


def _is_connect_failure(exc: requests.RequestException) -> bool:
    if isinstance(exc, requests.ConnectTimeout):
        return True
    reason = getattr(exc.args[0] if exc.args else None, "reason", None)
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


@contextmanager
def pinned_get(
    url: str, guard: AddressGuard, *, timeout: float, user_agent: str, accept: str
) -> Iterator[requests.Response]:
    """GET ``url`` (not following redirects) on a connection to a checked address.

    The host's addresses are tried in resolver order (at most four) while the connection
    itself fails; the response streams and is closed when the block ends.

    Raises:
      AddressRefused: the host resolves to an address the guard refuses.
      Retryable: the name does not resolve, no address accepts the connection, or the
        request fails after connecting.
    """
    parts = urlsplit(url)
    scheme, host, port = origin(url)
    headers = {"Host": parts.netloc, "User-Agent": user_agent, "Accept": accept}
    failure: requests.RequestException | None = None
    for address in guard.resolve(host, port, url)[:_MAX_ADDRESSES_TRIED]:
        netloc = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        target = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
        session = requests.Session()
        session.trust_env = False  # a proxy from the environment would bypass the pin
        if scheme == "https":
            session.mount("https://", _PinnedTLSAdapter(host))
        try:
            response = session.get(
                target, headers=headers, timeout=timeout, stream=True, allow_redirects=False
            )
        except requests.RequestException as exc:
            session.close()
            if _is_connect_failure(exc):
                failure = exc
                continue
            raise Retryable(f"GET {url}: {type(exc).__name__}: {exc}") from exc
        try:
            yield response
        finally:
            response.close()
            session.close()
        return
    raise Retryable(f"GET {url}: cannot connect: {failure}") from failure
