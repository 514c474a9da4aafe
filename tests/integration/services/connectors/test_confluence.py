"""ConfluenceProvider against a local server that speaks Confluence's REST API v2."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from services.connectors.base import SourceConfig
from services.connectors.confluence import ConfluenceProvider, default_base_url
from services.connectors.confluence_storage import storage_to_markdown
from shared.errors import Delay, JobError, Unrecoverable
from testkit.fakes.confluence_server import API, ConfluenceServer
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

EMAIL, TOKEN = "bot@example.com", "confluence-token"
SITE = "https://acme.atlassian.net"

STORAGE = """\
<h1>Runbook</h1>
<p>Read <strong>this</strong> and <em>that</em>, see
<ac:link><ri:page ri:content-title="Escalation" /><ac:plain-text-link-body>\
<![CDATA[the escalation page]]></ac:plain-text-link-body></ac:link> or
<ac:link><ri:page ri:content-title="On-call" /></ac:link> or
<a href="https://status.example.com">status</a>.</p>
<ac:structured-macro ac:name="code" ac:schema-version="1" ac:macro-id="1">\
<ac:parameter ac:name="language">bash</ac:parameter>\
<ac:plain-text-body><![CDATA[kubectl get pods | grep -v "Running" && echo '<done>']]>\
</ac:plain-text-body></ac:structured-macro>
<ac:structured-macro ac:name="warning"><ac:parameter ac:name="title">Careful</ac:parameter>\
<ac:rich-text-body><p>Do not restart <code>db-0</code>.</p></ac:rich-text-body>\
</ac:structured-macro>
<ac:structured-macro ac:name="toc" />
<ul><li>First<ul><li>Nested</li></ul></li><li>Second</li></ul>
<ol><li>One</li><li>Two</li></ol>
<table><tbody><tr><th><p>Service</p></th><th><p>Owner</p></th></tr>\
<tr><td><p>api</p></td><td><p>platform</p></td></tr></tbody></table>
<ac:image ac:alt="Topology"><ri:attachment ri:filename="topology.png" /></ac:image>
<ac:task-list><ac:task><ac:task-id>1</ac:task-id><ac:task-status>complete</ac:task-status>\
<ac:task-body>Page the owner</ac:task-body></ac:task><ac:task><ac:task-id>2</ac:task-id>\
<ac:task-status>incomplete</ac:task-status><ac:task-body>Write the postmortem</ac:task-body>\
</ac:task></ac:task-list>
<ac:structured-macro ac:name="expand"><ac:parameter ac:name="title">Details</ac:parameter>\
<ac:rich-text-body><p>Folded text</p></ac:rich-text-body></ac:structured-macro>
"""

EXPECTED = """\
# Runbook

Read **this** and *that*, see
the escalation page or
On-call or
[status](https://status.example.com).

```bash
kubectl get pods | grep -v "Running" && echo '<done>'
```

> **Careful**
>
> Do not restart `db-0`.

- First
  - Nested
- Second

1. One
2. Two

| Service | Owner |
| --- | --- |
| api | platform |

![Topology](https://acme.atlassian.net/wiki/download/attachments/{page}/topology.png)

- [x] Page the owner
- [ ] Write the postmortem

**Details**

Folded text
"""


@pytest.fixture
def server() -> Iterator[ConfluenceServer]:
    fake = ConfluenceServer(EMAIL, TOKEN, max_limit=4, site_url=SITE)
    with fake:
        yield fake


@pytest.fixture
def config(server: ConfluenceServer) -> SourceConfig:
    return SourceConfig(
        source_id=11,
        organization_id=3,
        source_type="confluence",
        base_url=server.base_url,
        settings={"email": EMAIL, "api_token": TOKEN},
        timeout=5.0,
    )


provider = ConfluenceProvider()


def pages_path(space_id: str) -> str:
    return f"{API}/spaces/{space_id}/pages"


# -- listing ------------------------------------------------------------------------------


def test_listing_follows_next_links_through_spaces_and_pages(
    server: ConfluenceServer, config: SourceConfig
) -> None:
    spaces = [server.add_space(f"S{n}", f"Space {n}") for n in range(6)]
    server.add_space("OLD", "Archived space", status="archived")
    pages = {s: [server.add_page(s, f"{s} page {n}") for n in range(9)] for s in spaces[:2]}
    server.add_page(spaces[0], "A draft", status="draft")
    server.add_page(spaces[0], "Archived page", status="archived")

    listing = provider.list_source(config)

    assert listing.complete
    assert [s.identifier for s in listing.sections] == [f"space:{s}" for s in spaces]
    assert [s.name for s in listing.sections][:2] == ["Space 0", "Space 1"]
    assert listing.sections[0].url == f"{SITE}/wiki/spaces/S0"
    expected = [(p, (f"space:{s}",)) for s in spaces[:2] for p in pages[s]]
    assert [(d.identifier, d.section_identifiers) for d in listing.documents] == expected
    first = listing.documents[0]
    assert first.title == f"{spaces[0]} page 0"
    assert first.url == f"{SITE}/wiki/spaces/S0/pages/{first.identifier}/{spaces[0]}+page+0"
    assert first.updated_at is not None and first.content is None
    assert len(server.requests_to(f"{API}/spaces")) == 2  # 6 spaces, 4 a page
    assert len(server.requests_to(pages_path(spaces[0]))) == 3  # 9 pages, 4 a page
    later = server.requests_to(pages_path(spaces[0]))[1]
    assert later.param("cursor") and later.param("status") == "current"


def test_a_next_link_on_the_sites_own_origin_is_followed(
    server: ConfluenceServer, config: SourceConfig
) -> None:
    server.next_origin = server.base_url  # absolute, but the configured site's own
    spaces = [server.add_space(f"S{n}", f"Space {n}") for n in range(6)]

    listing = provider.list_source(config)

    assert [s.identifier for s in listing.sections] == [f"space:{s}" for s in spaces]


def test_a_next_link_to_another_origin_is_refused_and_never_requested(
    server: ConfluenceServer, config: SourceConfig
) -> None:
    # Given an answer whose _links.next points at another server (the metadata service's
    # stand-in on another loopback port)
    elsewhere = ConfluenceServer(EMAIL, TOKEN)
    with elsewhere:
        server.next_origin = elsewhere.base_url
        for n in range(6):
            server.add_space(f"S{n}", f"Space {n}")

        with pytest.raises(Unrecoverable, match="refused: link to another origin"):
            provider.list_source(config)

        assert elsewhere.requests == []
    assert len(server.requests_to(f"{API}/spaces")) == 1


def test_space_keys_restrict_the_listing(server: ConfluenceServer, config: SourceConfig) -> None:
    wanted = server.add_space("ENG", "Engineering")
    other = server.add_space("HR", "People")
    page = server.add_page(wanted, "Deploys")
    server.add_page(other, "Payroll")

    for keys in (["ENG"], "ENG", "ENG, MISSING"):
        listing = provider.list_source(
            replace(config, settings={**config.settings, "space_keys": keys})
        )

        assert [s.identifier for s in listing.sections] == [f"space:{wanted}"]
        assert [d.identifier for d in listing.documents] == [page]
    assert server.requests_to(f"{API}/spaces")[-1].param("keys") == "ENG,MISSING"


# -- documents ----------------------------------------------------------------------------


def test_storage_format_renders_to_markdown(server: ConfluenceServer, config: SourceConfig) -> None:
    space = server.add_space("OPS", "Operations")
    page = server.add_page(space, "Runbook", STORAGE)

    document = provider.fetch_document(config, page)

    assert document is not None
    assert document.title == "Runbook"
    assert document.content == EXPECTED.format(page=page)
    assert document.url == f"{SITE}/wiki/spaces/OPS/pages/{page}/Runbook"
    assert document.updated_at is not None
    (request,) = server.requests_to(f"{API}/pages/{page}")
    assert request.param("body-format") == "storage"


def test_an_edited_page_has_a_newer_timestamp(
    server: ConfluenceServer, config: SourceConfig
) -> None:
    page = server.add_page(server.add_space("OPS", "Operations"), "Runbook", "<p>old</p>")
    before = provider.fetch_document(config, page)
    server.edit_page(page, storage="<p>new</p>")

    after = provider.fetch_document(config, page)

    assert before is not None and after is not None
    assert after.content == "new\n" and before.updated_at is not None
    assert after.updated_at is not None and after.updated_at > before.updated_at


def test_unknown_macros_keep_their_body_or_vanish() -> None:
    storage = (
        '<ac:structured-macro ac:name="status"><ac:parameter ac:name="title">OK'
        "</ac:parameter></ac:structured-macro>"
        '<ac:structured-macro ac:name="section"><ac:rich-text-body><p>Kept</p>'
        "</ac:rich-text-body></ac:structured-macro>"
    )

    assert storage_to_markdown(storage) == "Kept\n"


def test_a_missing_page_is_none(server: ConfluenceServer, config: SourceConfig) -> None:
    space = server.add_space("OPS", "Operations")
    trashed = server.add_page(space, "Binned", status="trashed")
    archived = server.add_page(space, "Old", status="archived")

    assert provider.fetch_document(config, "999999") is None
    assert provider.fetch_document(config, trashed) is None
    assert provider.fetch_document(config, archived) is None


def test_default_base_url_comes_from_the_site() -> None:
    assert default_base_url({"site": "acme"}) == "https://acme.atlassian.net"
    assert default_base_url({"site": "acme.atlassian.net"}) == "https://acme.atlassian.net"
    assert default_base_url({"site": "https://wiki.acme.com/wiki/"}) == "https://wiki.acme.com"
    assert default_base_url({}) is None


# -- failures -----------------------------------------------------------------------------


def test_wrong_credentials_are_unrecoverable(
    server: ConfluenceServer, config: SourceConfig
) -> None:
    page = server.add_page(server.add_space("OPS", "Operations"), "Runbook")
    wrong = replace(config, settings={"email": EMAIL, "api_token": "nope"})

    with pytest.raises(Unrecoverable, match="401"):
        provider.list_source(wrong)
    with pytest.raises(Unrecoverable, match="401"):
        provider.fetch_document(wrong, page)
    with pytest.raises(Unrecoverable, match="email and api_token"):
        provider.list_source(replace(config, settings={"api_token": TOKEN}))


def test_retry_after_becomes_a_delay_until_then(
    server: ConfluenceServer, config: SourceConfig
) -> None:
    page = server.add_page(server.add_space("OPS", "Operations"), "Runbook")
    server.fail(f"{API}/pages/{page}", "429", retry_after=45)

    with pytest.raises(Delay) as raised:
        provider.fetch_document(config, page)

    assert raised.value.until == pytest.approx(time.time() + 45, abs=3)


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [
        pytest.param(kind, options, error, id=name)
        for name, kind, options, error in TRANSIENT_FAILURES
    ],
)
def test_a_failed_listing_page_raises(
    server: ConfluenceServer,
    config: SourceConfig,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    space = server.add_space("OPS", "Operations")
    for n in range(10):
        server.add_page(space, f"Page {n}")
    server.fail(pages_path(space), kind, after=1, **options)  # the second page of three

    with pytest.raises(error):
        provider.list_source(replace(config, timeout=0.5))

    assert len(server.requests_to(pages_path(space))) == 2


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [
        pytest.param(kind, options, error, id=name)
        for name, kind, options, error in TRANSIENT_FAILURES
    ],
)
def test_a_failed_page_fetch_raises(
    server: ConfluenceServer,
    config: SourceConfig,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    page = server.add_page(server.add_space("OPS", "Operations"), "Runbook", STORAGE)
    server.fail(f"{API}/pages/{page}", kind, **options)

    with pytest.raises(error):
        provider.fetch_document(replace(config, timeout=0.5), page)


# -- the fake against atlassian-python-api (ConfluenceV2, the Cloud REST API v2 client) -------


def test_atlassian_python_api_reads_the_fakes_spaces_and_pages(server: ConfluenceServer) -> None:
    import warnings

    import requests
    from atlassian import ConfluenceV2

    space = server.add_space("ENG", "Engineering")
    server.add_space("OPS", "Operations")
    pages = [server.add_page(space, f"Page {n}", f"<p>Body {n}</p>") for n in range(5)]
    server.add_page(space, "Old", status="archived")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        client = ConfluenceV2(
            url=f"{server.base_url}/wiki",
            username=EMAIL,
            password=TOKEN,
            cloud=True,
        )
        denied = ConfluenceV2(
            url=f"{server.base_url}/wiki", username=EMAIL, password="x", cloud=True
        )

    assert [s["key"] for s in client.get_spaces(keys=["ENG"])] == ["ENG"]
    listed = client.get_pages(space_id=space, limit=2)  # the SDK follows _links.next
    assert [p["id"] for p in listed] == pages
    page = client.get_page_by_id(pages[0], body_format="storage")
    assert page["title"] == "Page 0"
    assert page["body"]["storage"] == {"representation": "storage", "value": "<p>Body 0</p>"}
    assert page["version"]["number"] == 1
    with pytest.raises(requests.HTTPError) as missing:
        client.get_page_by_id("999999")
    assert missing.value.response is not None and missing.value.response.status_code == 404
    with pytest.raises(requests.HTTPError) as unauthorized:
        denied.get_spaces()
    assert unauthorized.value.response is not None
    assert unauthorized.value.response.status_code == 401
