"""The 35 forms of a non-public address every outbound call must refuse to connect to.

They are the hosts the web fetcher's tests refuse (loopback, private, link-local,
unspecified, multicast, reserved, shared, IPv4 inside IPv6: mapped, NAT64, 6to4) plus the
spellings of loopback and the metadata address a URL parser hands to the resolver as they
are (decimal, hexadecimal, octal, shortened, hex-mapped IPv6). Each is written as the host
part of a URL (IPv6 in brackets).
"""

from __future__ import annotations

PRIVATE_ADDRESS_FORMS: tuple[str, ...] = (
    # loopback
    "127.0.0.1", "127.0.0.2", "localhost", "[::1]", "[::ffff:127.0.0.1]",
    "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "[::ffff:7f00:1]",
    # private (RFC 1918, unique local)
    "10.0.0.1", "10.20.30.40", "172.16.0.1", "172.31.255.255", "192.168.0.1",
    "192.168.1.1", "192.168.1.20", "[fc00::1]", "[::ffff:10.0.0.1]",
    # link-local and the cloud metadata address
    "169.254.169.254", "[fe80::1]", "[::ffff:169.254.1.1]", "[::ffff:a9fe:a9fe]",
    # unspecified, broadcast, multicast, reserved, shared, benchmarking
    "0.0.0.0", "[::]", "255.255.255.255", "224.0.0.1", "224.0.0.251", "[ff02::1]",
    "240.0.0.1", "100.64.0.1", "198.18.0.1",
    # IPv4 embedded in IPv6: NAT64, 6to4, IPv4-compatible
    "[64:ff9b::a00:1]", "[2002:a00:1::]", "[::127.0.0.1]",
)  # fmt: skip

assert len(PRIVATE_ADDRESS_FORMS) == len(set(PRIVATE_ADDRESS_FORMS)) == 35
