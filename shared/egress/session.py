"""The guarded HTTP session every outbound call goes through.

A :func:`guarded_session` is a ``requests.Session`` whose connections are made by the
address guard (:mod:`shared.egress.addresses`): the host is resolved once when a connection
is opened, every address it resolves to is checked, and the socket is connected to a checked
address itself, while the ``Host`` header, SNI and certificate check keep the name (no DNS
rebinding between check and connect). Redirects and pagination links open their
connections the same way, so every hop is checked.

=====================================  ==============================================
what                                   answer
=====================================  ==============================================
a host resolving to a refused address  ``AddressRefused`` (``Unrecoverable``), before
                                       any byte is sent
a name that does not resolve           ``Retryable``
no checked address accepts             ``requests.ConnectionError`` (a transport
                                       failure the caller translates)
a link to another origin               ``Unrecoverable`` (:func:`same_origin_url`)
=====================================  ==============================================

The session ignores proxy variables of the environment (a proxy would connect for us,
unchecked). Which addresses are allowed is the process's guard (:func:`set_default_guard`,
set at bootstrap from ``crawl_allow_private_networks`` and ``egress_allowed_networks``) unless
a caller passes its own.
"""

from __future__ import annotations

import socket
from typing import Any, ClassVar
from urllib.parse import urljoin, urlsplit

import requests
from urllib3 import PoolManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.connection import create_connection

from shared.egress.addresses import AddressGuard, default_guard
from shared.errors import Unrecoverable

#: Addresses of one host tried in resolver order while the connection itself fails.
MAX_ADDRESSES_TRIED = 4
#: Redirects a guarded session follows (each hop checked) before giving up.
MAX_REDIRECTS = 5


class _GuardedConnection(HTTPConnection):
    """An HTTP connection whose socket goes to an address the guard checked."""

    guard: ClassVar[AddressGuard]

    def _new_conn(self) -> socket.socket:
        failure: Exception | None = None
        url = f"{self.host}:{self.port}"
        for address in self.guard.resolve(self._dns_host, self.port, url)[:MAX_ADDRESSES_TRIED]:
            try:
                return create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except TimeoutError as exc:
                failure = ConnectTimeoutError(self, f"Connection to {self.host} timed out")
                failure.__cause__ = exc
            except OSError as exc:
                failure = NewConnectionError(self, f"Failed to establish a new connection: {exc}")
        assert failure is not None  # resolve() returns at least one address
        raise failure


class _GuardedHTTPSConnection(_GuardedConnection, HTTPSConnection):
    """The TLS variant: connects to the checked address, verifies the name's certificate."""


def _pool_classes(guard: AddressGuard) -> dict[str, type[HTTPConnectionPool]]:
    plain = type("GuardedHTTPConnection", (_GuardedConnection,), {"guard": guard})
    tls = type("GuardedHTTPSConnection", (_GuardedHTTPSConnection,), {"guard": guard})
    return {
        "http": type("GuardedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": plain}),
        "https": type("GuardedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": tls}),
    }


class GuardedAdapter(requests.adapters.HTTPAdapter):
    """A transport adapter whose every connection is opened through ``guard``."""

    def __init__(self, guard: AddressGuard, **kwargs: Any) -> None:
        self.guard = guard  # read by init_poolmanager, which __init__ calls
        super().__init__(**kwargs)

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = _pool_classes(self.guard)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        raise Unrecoverable(f"a guarded session does not connect through a proxy ({proxy})")


def guarded_session(guard: AddressGuard | None = None) -> requests.Session:
    """A ``requests.Session`` whose every connection goes through ``guard`` (the process's
    guard by default), following at most :data:`MAX_REDIRECTS` redirects."""
    session = requests.Session()
    session.trust_env = False  # a proxy from the environment would connect unchecked
    session.max_redirects = MAX_REDIRECTS
    adapter = GuardedAdapter(guard or default_guard())
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def guarded_pool_manager(guard: AddressGuard | None = None, **kwargs: Any) -> PoolManager:
    """A ``urllib3.PoolManager`` whose every connection goes through ``guard`` (the
    process's guard by default), for clients built on urllib3 itself (dulwich's HTTP
    transport)."""
    manager = PoolManager(**kwargs)
    manager.pool_classes_by_scheme = _pool_classes(guard or default_guard())
    return manager


def origin_of(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of ``url``, the port defaulted from the scheme."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


def same_origin_url(base_url: str, link: str) -> str:
    """``link`` (a pagination or next link from a provider's answer) resolved against
    ``base_url``; refused when it names another origin, so credentials and requests go only
    where the source is configured.

    Raises:
      Unrecoverable: ``link`` is absolute (or scheme-relative) to another origin.
    """
    resolved = urljoin(base_url.rstrip("/") + "/", link)
    if origin_of(resolved) != origin_of(base_url):
        raise Unrecoverable(
            f"refused: link to another origin {resolved!r} (the source is {base_url!r})"
        )
    return resolved
