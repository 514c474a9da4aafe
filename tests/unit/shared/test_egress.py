"""The egress guard's pieces that need no network: the settings it is built from, the
refusal of a setting's host decided without DNS, and the same-origin rule for links."""

from __future__ import annotations

import pytest

from shared.config import InvalidSettings, load_settings
from shared.egress.addresses import address_guard, settings_guard
from shared.egress.session import same_origin_url
from shared.errors import Unrecoverable


def test_allowed_networks_come_from_the_settings() -> None:
    settings = load_settings(egress_allowed_networks="10.20.0.0/16, 127.0.0.1/32")
    guard = settings_guard(settings)

    assert not guard.allow_private
    assert guard.refusal("10.20.3.4") is None and guard.refusal("127.0.0.1") is None
    assert guard.refusal("10.21.0.1") == "address 10.21.0.1 is private"


def test_a_value_that_is_not_a_network_refuses_to_start_naming_the_variable() -> None:
    with pytest.raises(InvalidSettings, match="SPEEDTIER_EGRESS_ALLOWED_NETWORKS"):
        load_settings(egress_allowed_networks="10.0.0.0/8,intranet")


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("169.254.169.254", "address 169.254.169.254 is link-local"),
        ("2130706433", "address 127.0.0.1 is loopback"),
        ("0x7f000001", "address 127.0.0.1 is loopback"),
        ("localhost", "address 127.0.0.1 is loopback"),
        ("[::ffff:10.0.0.1]", "address ::ffff:a00:1 is private"),
        ("acme.atlassian.net", None),  # a name: checked when a connection is opened
        ("93.184.216.34", None),
    ],
)
def test_a_hosts_refusal_is_decided_without_dns(host: str, refused: str | None) -> None:
    assert address_guard(False).refusal(host) == refused


@pytest.mark.parametrize(
    ("link", "resolved"),
    [
        ("/wiki/api/v2/spaces?cursor=x", "https://acme.atlassian.net/wiki/api/v2/spaces?cursor=x"),
        ("https://acme.atlassian.net/wiki/x", "https://acme.atlassian.net/wiki/x"),
        ("https://ACME.atlassian.net:443/y", "https://ACME.atlassian.net:443/y"),
    ],
)
def test_a_link_on_the_same_origin_is_resolved(link: str, resolved: str) -> None:
    assert same_origin_url("https://acme.atlassian.net", link) == resolved


@pytest.mark.parametrize(
    "link",
    [
        "http://127.0.0.1:8471/latest/meta-data/iam/",
        "//169.254.169.254/latest/meta-data/",
        "http://acme.atlassian.net/wiki/x",  # another scheme is another origin
        "https://acme.atlassian.net:8443/x",
        "https://acme.atlassian.net.evil.test/x",
    ],
)
def test_a_link_to_another_origin_is_refused(link: str) -> None:
    with pytest.raises(Unrecoverable, match="refused: link to another origin"):
        same_origin_url("https://acme.atlassian.net", link)
