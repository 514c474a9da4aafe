"""Every connector goes through the egress guard: with the guard production runs (no private
network), each of the 35 forms of a non-public address (``testkit.private_addresses``) as the
provider's host is refused before a connection is opened, and a provider's next link to
another origin is not followed.

The first request of each connector is the one tried: a listing (knowledge providers), the
roots or a walk (super sources), a website's first page, a Git remote's refs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from services.connectors import (
    asana,
    attio,
    confluence,
    git_repository,
    github,
    gitlab,
    google_drive,
    hubspot,
    linear,
    notion,
    notion_nodes,
    scribe,
    sharepoint,
    website,
    zendesk,
)
from services.connectors.base import SourceConfig
from services.connectors.nodes import Connection, NodeRef
from shared.egress.addresses import AddressRefused, address_guard, default_guard, set_default_guard
from testkit.private_addresses import PRIVATE_ADDRESS_FORMS


@pytest.fixture
def production_guard() -> Iterator[None]:
    before = default_guard()
    set_default_guard(address_guard(False))
    yield
    set_default_guard(before)


def kb(provider: Any, **settings: Any) -> Callable[[str], object]:
    def first_request(base_url: str) -> object:
        config = SourceConfig(1, 1, provider.source_types[0], base_url, settings, timeout=2.0)
        return provider.list_source(config)

    return first_request


def node(source: Any, call: str = "list_roots", root: NodeRef | None = None, **settings: Any):
    def first_request(base_url: str) -> object:
        credentials = {"token": "t", "access_token": "t", "api_key": "k"}
        conn = Connection(source.source, 1, 1, base_url, credentials, settings, timeout=2.0)
        if call == "walk":
            return source.walk(conn, root or NodeRef("", ""), None)
        return source.list_roots(conn)

    return first_request


def website_root(base_url: str) -> object:
    conn = Connection("website", 1, 1, "", {}, {}, timeout=2.0)
    return website.SOURCE.walk(conn, NodeRef(website.ROOT, base_url + "docs"), None)


def git_remote(base_url: str) -> object:
    conn = Connection("git", 1, 1, "", {}, {"repositories": []}, timeout=2.0)
    root = NodeRef(git_repository.REPOSITORY, base_url + "team/repo.git")
    return git_repository.SOURCE.walk(conn, root, None)


CONNECTORS: dict[str, Callable[[str], object]] = {
    "notion": kb(notion.NotionProvider(), api_token="t"),
    "zendesk": kb(zendesk.ZendeskProvider(), email="e@x", api_token="t"),
    "confluence": kb(confluence.ConfluenceProvider(), email="e@x", api_token="t"),
    "scribe": kb(scribe.ScribeProvider(), api_key="k"),
    "github": node(github.SOURCE),
    "gitlab": node(gitlab.SOURCE),
    "linear": node(linear.SOURCE),
    "asana": node(asana.SOURCE),
    "attio": node(attio.SOURCE),
    "hubspot": node(hubspot.SOURCE, "walk", NodeRef(hubspot.OBJECT_TYPE, "contacts")),
    "google_drive": node(google_drive.SOURCE),
    "sharepoint": node(sharepoint.SOURCE, sites=["contoso.sharepoint.com:/sites/docs"]),
    "notion_nodes": node(notion_nodes.SOURCE),
    "website": website_root,
    "git": git_remote,
}


@pytest.mark.usefixtures("production_guard")
@pytest.mark.parametrize("name", sorted(CONNECTORS))
def test_every_connector_refuses_the_35_forms_of_a_private_address(name: str) -> None:
    first_request = CONNECTORS[name]
    answered: dict[str, str] = {}

    for host in PRIVATE_ADDRESS_FORMS:
        try:
            first_request(f"http://{host}:8471/")
        except AddressRefused as refused:
            answered[host] = refused.reason
        except Exception as other:
            answered[host] = f"not refused: {type(other).__name__}: {other}"
        else:
            answered[host] = "not refused: answered"

    assert {h: r for h, r in answered.items() if not r.startswith("refused: address")} == {}
    assert len(answered) == 35
