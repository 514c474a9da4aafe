"""One GET on a connection to an address the SSRF guard checked.

The connection is opened by the guarded session (:mod:`shared.egress.session`): the host is
resolved once, every address checked, and the socket connected to a checked address itself,
with the ``Host`` header, SNI and certificate check of the name, so a second DNS answer cannot
point the request elsewhere (no DNS rebinding between check and connect). Redirects are not
followed here (see :mod:`.redirects`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import requests
import urllib3.exceptions

from shared.egress.addresses import AddressGuard, AddressRefused
from shared.egress.session import guarded_session
from shared.errors import Retryable

DEFAULT_USER_AGENT = "speedtier-crawler"


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
    headers = {"User-Agent": user_agent, "Accept": accept}
    with guarded_session(guard) as session:
        try:
            response = session.get(
                url, headers=headers, timeout=timeout, stream=True, allow_redirects=False
            )
        except AddressRefused as refused:
            raise AddressRefused(url, refused.host, refused.address, refused.kind) from None
        except requests.RequestException as exc:
            if _is_connect_failure(exc):
                raise Retryable(f"GET {url}: cannot connect: {exc}") from exc
            raise Retryable(f"GET {url}: {type(exc).__name__}: {exc}") from exc
        try:
            yield response
        finally:
            response.close()
