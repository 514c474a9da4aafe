"""The SSRF guard every outbound call goes through: which addresses may be connected to.

A host is resolved once and every address it resolves to must be public: private, loopback,
link-local, multicast, reserved, unspecified and other non-global addresses are refused,
IPv4 addresses embedded in IPv6 ones (mapped, 6to4, Teredo, NAT64) included, unless private
networks are allowed (tests, the demo) or the network is allowed by name. A refusal is an
:class:`AddressRefused`: ``Unrecoverable`` with a reason a URL document shows
(``refused: address 10.0.0.1 is private``), logged by whoever knows the organization
(:func:`log_refusal`).

The process's guard (:func:`set_default_guard`, set at bootstrap from the settings) is the
guard of every session built without one (``shared.egress.session``); it lives here, apart
from the sessions, so setting it does not import ``requests`` (a worker needs it for none of
the work before its first job).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shared.errors import Retryable, Unrecoverable

if TYPE_CHECKING:
    from shared.config import Settings

log = logging.getLogger(__name__)

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(Unrecoverable):
    """The SSRF guard refused to connect: ``host`` resolves to a non-public ``address``.

    ``reason`` is what a URL document shows (``refused: address 10.0.0.1 is private``);
    :func:`log_refusal` writes the WARNING an operator needs to see who asked for it.
    """

    def __init__(self, url: str, host: str, address: str, kind: str) -> None:
        self.url, self.host, self.address, self.kind = url, host, address, kind
        self.reason = f"refused: address {address} is {kind}"
        super().__init__(f"GET {url}: {host} {self.reason}")


def log_refusal(refused: AddressRefused, *, organization_id: int, requested: str) -> None:
    """The WARNING of a refused address: the organization, the URL it asked for, and the
    URL, host and address refused (a redirect hop or robots.txt may be what was refused)."""
    log.warning(
        "SSRF guard: refused %s for organization %s (asked for %s): %s resolves to %s, which is %s",
        refused.url,
        organization_id,
        requested,
        refused.host,
        refused.address,
        refused.kind,
    )


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public_address(address: Address) -> bool:
    """False for private, loopback, link-local, multicast, reserved, unspecified and other
    non-global addresses, including IPv4 addresses embedded in IPv6 ones."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None and not is_public_address(embedded):
            return False
    return not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


def non_public_kind(address: Address) -> str:
    """What makes a refused address non-public, in words: loopback, link-local,
    unspecified, multicast, private, reserved or not globally routable."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None and not is_public_address(embedded):
            return non_public_kind(embedded)
    checks = (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("unspecified", address.is_unspecified),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    )
    return next((kind for kind, applies in checks if applies), "not globally routable")


@dataclass(frozen=True)
class AddressGuard:
    """Which addresses the crawler may connect to.

    Attributes:
      allow_private: allow every address (development, tests against local servers).
      allowed_networks: networks allowed even when private (an internal docs host).
    """

    allow_private: bool
    allowed_networks: tuple[Network, ...] = ()

    def permits(self, address: Address) -> bool:
        if self.allow_private or is_public_address(address):
            return True
        return any(address in network for network in self.allowed_networks)

    def refusal(self, host: str) -> str | None:
        """Why a connection to ``host`` would be refused, when that is known without asking
        DNS (an address in any spelling, ``localhost``); None for a name, which is checked
        when a connection is opened. For a setting checked when it is saved."""
        name = host.strip("[]").lower().rstrip(".")
        flags = 0 if name == "localhost" or name.endswith(".localhost") else socket.AI_NUMERICHOST
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM, flags=flags)
        except (OSError, UnicodeError):
            return None
        for info in infos:
            address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
            if not self.permits(address):
                return f"address {address} is {non_public_kind(address)}"
        return None

    def resolve(self, host: str, port: int, url: str = "") -> list[str]:
        """The addresses of ``host`` (the host of ``url``) to connect to, in resolver order.

        Raises:
          AddressRefused: when any address is refused (a host that answers one private
            address among public ones is refused whole).
          Unrecoverable: when the name is not encodable.
          Retryable: when the name does not resolve (DNS failures are often transient).
        """
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except UnicodeError as exc:
            raise Unrecoverable(f"{host}: invalid host name: {exc}") from exc
        except OSError as exc:
            raise Retryable(f"{host}: cannot resolve: {exc}") from exc
        addresses: list[str] = []
        for info in infos:
            text = str(info[4][0]).split("%", 1)[0]
            address = ipaddress.ip_address(text)
            if not self.permits(address):
                raise AddressRefused(url or host, host, text, non_public_kind(address))
            if text not in addresses:
                addresses.append(text)
        if not addresses:
            raise Retryable(f"{host}: no address")
        return addresses


def address_guard(
    allow_private: bool, allowed_networks: Sequence[str | Network] = ()
) -> AddressGuard:
    """The guard of a fetcher's settings (``allowed_networks`` as strings or networks)."""
    networks = tuple(ipaddress.ip_network(n) for n in allowed_networks)
    return AddressGuard(allow_private, networks)


def settings_guard(settings: Settings) -> AddressGuard:
    """The guard of a process's settings: every address with
    ``crawl_allow_private_networks``, otherwise public ones and ``egress_allowed_networks``."""
    return address_guard(settings.crawl_allow_private_networks, settings.egress_networks)


_default_guard = AddressGuard(allow_private=False)


def set_default_guard(guard: AddressGuard) -> None:
    """The guard of every session built without one (a process sets it once at bootstrap)."""
    global _default_guard
    _default_guard = guard


def default_guard() -> AddressGuard:
    """The process's guard: no private address unless bootstrap allowed some."""
    return _default_guard
