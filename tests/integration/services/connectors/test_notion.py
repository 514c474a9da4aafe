"""NotionProvider against a local server that speaks the Notion API (and its failures)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from services.connectors.base import SourceConfig
from services.connectors.notion import NotionProvider
from shared.errors import Delay, JobError, Retryable, Unrecoverable
from testkit.fakes.notion_server import (
    NotionServer,
    bulleted,
    callout,
    code,
    divider,
    heading,
    image,
    numbered,
    paragraph,
    populate,
    quote,
    table,
    text,
    todo,
    toggle,
)
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

TOKEN = "secret_notion"
SEARCH = "/v1/search"


@pytest.fixture
def server() -> Iterator[NotionServer]:
    fake = NotionServer(TOKEN, max_page_size=4)
    with fake:
        yield fake


@pytest.fixture
def config(server: NotionServer) -> SourceConfig:
    return SourceConfig(
        source_id=7,
        organization_id=3,
        source_type="notion",
        base_url=server.base_url,
        settings={"api_token": TOKEN},
        timeout=5.0,
    )


provider = NotionProvider()


def every_block_type() -> list[dict[str, Any]]:
    return [
        heading(1, "Title one"),
        heading(2, "Title two"),
        heading(3, "Title three"),
        paragraph(
            "Plain ",
            text("bold", bold=True),
            " ",
            text("italic", italic=True),
            " ",
            text("code", code=True),
            " ",
            text("struck", strikethrough=True),
            " ",
            text("link", link="https://example.com/a"),
            " ",
            text("both ", bold=True, italic=True),
            "end",
        ),
        bulleted("One", children=[bulleted("One.a", children=[bulleted("One.a.i")])]),
        bulleted("Two"),
        numbered("First", children=[numbered("Inner")]),
        numbered("Second"),
        todo("Done", checked=True),
        todo("Open"),
        quote("Quoted"),
        callout("Careful", emoji="⚠️"),
        code("def f():\n    return 1", "python"),
        code("no language"),
        divider(),
        table([["Name", "Value"], ["a|b", "1"], ["c", ""]]),
        toggle("Summary", children=[paragraph("Hidden"), bulleted("Hidden item")]),
        image("https://example.com/i.png", "Diagram"),
    ]


EXPECTED = """\
# Title one

## Title two

### Title three

Plain **bold** *italic* `code` ~~struck~~ [link](https://example.com/a) ***both*** end

- One
  - One.a
    - One.a.i
- Two

1. First
   1. Inner
2. Second

- [x] Done
- [ ] Open

> Quoted

> ⚠️ Careful

```python
def f():
    return 1
```

```
no language
```

---

| Name | Value |
| --- | --- |
| a\\|b | 1 |
| c |  |

- Summary

  Hidden

  - Hidden item

![Diagram](https://example.com/i.png)

[Child page](https://www.notion.so/{child})"""


# -- listing ------------------------------------------------------------------------------


def test_listing_follows_the_cursor_through_every_page(
    server: NotionServer, config: SourceConfig
) -> None:
    ids = [server.add_page(f"Page {n}") for n in range(37)]

    listing = provider.list_source(config)

    assert [d.identifier for d in listing.documents] == ids
    assert listing.complete
    assert len(server.requests_to(SEARCH)) == 10  # 37 pages, 4 a page
    first = listing.documents[0]
    assert first.title == "Page 0"
    assert first.url and first.url.endswith(ids[0].replace("-", ""))
    assert first.updated_at is not None and first.updated_at.tzinfo is not None
    assert first.content is None
    bodies = [r.body for r in server.requests_to(SEARCH)]
    assert all(b["filter"] == {"property": "object", "value": "page"} for b in bodies)
    assert all(b["page_size"] == 100 for b in bodies)
    assert [b.get("start_cursor") for b in bodies[:2]] == [None, ids[4]]
    assert all(r.headers["notion-version"] == "2022-06-28" for r in server.requests)


def test_archived_and_trashed_pages_are_not_listed(
    server: NotionServer, config: SourceConfig
) -> None:
    kept = server.add_page("Kept")
    server.add_page("Archived", archived=True)
    server.add_page("Trashed", in_trash=True)

    assert [d.identifier for d in provider.list_source(config).documents] == [kept]


def test_database_pages_take_their_title_property(
    server: NotionServer, config: SourceConfig
) -> None:
    database = server.add_database("Tasks")
    server.add_page("Row one", database=database)

    (document,) = provider.list_source(config).documents
    assert document.title == "Row one"


def test_root_page_ids_restrict_the_listing_to_descendants(
    server: NotionServer, config: SourceConfig
) -> None:
    root = server.add_page("Root")
    child = server.add_page("Child", parent=root)
    grandchild = server.add_page("Grandchild", parent=child)
    database = server.add_database("Tracker", parent=root)
    row = server.add_page("Row", database=database)
    (toggle_id,) = server.append(root, [toggle("Folded")])
    in_block = server.add_page("In a toggle")
    server.pages[in_block.replace("-", "")]["parent"] = {"type": "block_id", "block_id": toggle_id}
    outside = server.add_page("Elsewhere")
    server.add_page("Under elsewhere", parent=outside)
    hidden_parent = server.add_page("Not shared")
    orphan = server.add_page("Orphan", parent=hidden_parent)
    server.remove_page(hidden_parent)
    settings = {**config.settings, "root_page_ids": [root.replace("-", "").upper()]}

    listing = provider.list_source(replace(config, settings=settings))

    listed = {d.identifier for d in listing.documents}
    assert listed == {root, child, grandchild, row, in_block}
    assert orphan not in listed
    assert len(server.requests_to(f"/v1/databases/{database.replace('-', '')}")) == 1


def test_root_page_ids_accepts_a_comma_separated_string(
    server: NotionServer, config: SourceConfig
) -> None:
    first, second = server.add_page("First"), server.add_page("Second")
    server.add_page("Third")
    settings = {**config.settings, "root_page_ids": f"{first}, {second}"}

    listing = provider.list_source(replace(config, settings=settings))

    assert {d.identifier for d in listing.documents} == {first, second}


def test_a_generated_workspace_of_500_pages_lists_and_renders() -> None:
    fake = NotionServer(TOKEN)
    with fake as base_url:
        ids = populate(fake, 500)
        config = SourceConfig(1, 1, "notion", base_url, {"api_token": TOKEN})

        listing = provider.list_source(config)
        document = provider.fetch_document(config, ids[30])

    assert {d.identifier for d in listing.documents} == set(ids)
    assert document is not None and document.content.startswith("# Guide 30")
    assert "| n | 30 |" in document.content and "- [x] Done" in document.content


# -- documents ----------------------------------------------------------------------------


def test_every_block_type_renders_to_markdown(server: NotionServer, config: SourceConfig) -> None:
    page = server.add_page("Handbook", every_block_type())
    child = server.add_page("Child page", [paragraph("Not inlined")], parent=page)

    document = provider.fetch_document(config, page)

    assert document is not None
    assert document.title == "Handbook"
    assert document.content == EXPECTED.format(child=child.replace("-", ""))
    assert document.url == server.pages[page.replace("-", "")]["url"]
    assert document.updated_at is not None
    assert not server.requests_to(f"/v1/blocks/{child}/children")
    assert len(server.requests_to(f"/v1/blocks/{page}/children")) == 5  # 19 blocks, 4 a page


def test_a_missing_page_is_none(server: NotionServer, config: SourceConfig) -> None:
    gone = server.add_page("Gone", [paragraph("x")])
    server.remove_page(gone)

    assert provider.fetch_document(config, gone) is None
    assert provider.fetch_document(config, "00000000-0000-0000-0000-000000000000") is None


def test_a_trashed_page_is_none(server: NotionServer, config: SourceConfig) -> None:
    page = server.add_page("Binned", [paragraph("x")], in_trash=True)

    assert provider.fetch_document(config, page) is None


def test_a_block_removed_while_reading_is_retryable(
    server: NotionServer, config: SourceConfig
) -> None:
    page = server.add_page("Page", [toggle("Folded", children=[paragraph("x")])])
    (toggle_id,) = server.children[page.replace("-", "")]
    server.fail(f"/v1/blocks/{toggle_id}/children", "404")

    with pytest.raises(Retryable):
        provider.fetch_document(config, page)


# -- failures -----------------------------------------------------------------------------


def test_a_wrong_token_is_unrecoverable(server: NotionServer, config: SourceConfig) -> None:
    page = server.add_page("Page")
    wrong = replace(config, settings={"api_token": "secret_wrong"})

    with pytest.raises(Unrecoverable, match="401"):
        provider.list_source(wrong)
    with pytest.raises(Unrecoverable, match="401"):
        provider.fetch_document(wrong, page)


def test_a_source_without_a_token_is_unrecoverable(config: SourceConfig) -> None:
    with pytest.raises(Unrecoverable, match="api_token"):
        provider.list_source(replace(config, settings={}))


def test_retry_after_becomes_a_delay_until_then(server: NotionServer, config: SourceConfig) -> None:
    page = server.add_page("Page", [paragraph("x")])
    server.fail(f"/v1/blocks/{page}/children", "429", retry_after=30)

    with pytest.raises(Delay) as raised:
        provider.fetch_document(config, page)

    assert raised.value.until == pytest.approx(time.time() + 30, abs=3)


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [
        pytest.param(kind, options, error, id=name)
        for name, kind, options, error in TRANSIENT_FAILURES
    ],
)
def test_a_failed_listing_page_raises(
    server: NotionServer,
    config: SourceConfig,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    for n in range(10):
        server.add_page(f"Page {n}")
    server.fail(SEARCH, kind, after=1, **options)  # the second page of three

    with pytest.raises(error):
        provider.list_source(replace(config, timeout=0.5))

    assert len(server.requests_to(SEARCH)) == 2


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [
        pytest.param(kind, options, error, id=name)
        for name, kind, options, error in TRANSIENT_FAILURES
    ],
)
def test_a_failed_block_page_raises(
    server: NotionServer,
    config: SourceConfig,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    page = server.add_page("Page", [toggle("Folded", children=[paragraph("x")])])
    (toggle_id,) = server.children[page.replace("-", "")]
    server.fail(f"/v1/blocks/{toggle_id}/children", kind, **options)

    with pytest.raises(error):
        provider.fetch_document(replace(config, timeout=0.5), page)


# -- removal is proven per page (search is not a complete listing) ---------------------------


def test_the_listing_is_not_a_snapshot_and_removal_is_proven_per_page(
    server: NotionServer, config: SourceConfig
) -> None:
    live, unindexed, trashed = (server.add_page(t) for t in ("Live", "Unindexed", "Trashed"))
    deleted = server.add_page("Deleted")
    server.hide_from_search(unindexed)
    server.archive_page(trashed)
    server.remove_page(deleted)

    listing = provider.list_source(config)

    assert [d.identifier for d in listing.documents] == [live]
    assert listing.removal_needs_proof
    gone = provider.confirm_gone(config, [unindexed, trashed, deleted])
    assert gone == {trashed, deleted}


def test_a_page_moved_out_of_the_roots_is_gone(server: NotionServer, config: SourceConfig) -> None:
    root, elsewhere = server.add_page("Root"), server.add_page("Elsewhere")
    under, moved = server.add_page("Under", parent=root), server.add_page("Moved", parent=elsewhere)
    scoped = replace(config, settings={**config.settings, "root_page_ids": [root]})

    assert provider.confirm_gone(scoped, [under, moved]) == {moved}


def test_a_failed_proof_raises_so_nothing_is_removed(
    server: NotionServer, config: SourceConfig
) -> None:
    page = server.add_page("Page")
    server.fail(f"/v1/pages/{page}", "500")

    with pytest.raises(Retryable):
        provider.confirm_gone(config, [page])


@pytest.mark.parametrize("status", ["529", "503"])
def test_an_overloaded_notion_with_retry_after_delays_until_then(
    server: NotionServer, config: SourceConfig, status: str
) -> None:
    server.add_page("Page")
    server.fail(SEARCH, status, retry_after=40)

    with pytest.raises(Delay) as raised:
        provider.list_source(config)

    assert raised.value.until == pytest.approx(time.time() + 40, abs=3)
    assert raised.value.source == "provider"


def test_an_overloaded_notion_without_retry_after_is_retryable(
    server: NotionServer, config: SourceConfig
) -> None:
    server.add_page("Page")
    server.fail(SEARCH, "529")

    with pytest.raises(Retryable):
        provider.list_source(config)


# -- the fake against Notion's official Python SDK (notion-client) ------------------------


@pytest.fixture
def sdk(server: NotionServer) -> Any:
    from notion_client import Client

    return Client(auth=TOKEN, base_url=server.base_url, notion_version="2022-06-28", retry=False)


def test_the_official_sdk_searches_pages_and_reads_blocks_from_the_fake(
    server: NotionServer, sdk: Any
) -> None:
    from notion_client.helpers import collect_paginated_api

    ids = [server.add_page(f"Page {n}", [paragraph(f"Body {n}")]) for n in range(9)]

    pages = collect_paginated_api(
        sdk.search, filter={"property": "object", "value": "page"}, page_size=100
    )
    assert [p["id"] for p in pages] == ids
    page = sdk.pages.retrieve(page_id=ids[3])
    assert page["object"] == "page" and page["properties"]["title"]["title"][0]["plain_text"]
    blocks = sdk.blocks.children.list(block_id=ids[3])
    assert blocks["results"][0]["type"] == "paragraph"
    assert blocks["has_more"] is False and blocks["next_cursor"] is None


def test_the_official_sdk_reads_the_fakes_errors(server: NotionServer, sdk: Any) -> None:
    from notion_client import APIErrorCode, APIResponseError, Client
    from notion_client.errors import HTTPResponseError

    page = server.add_page("Page")
    server.remove_page(page)
    with pytest.raises(APIResponseError) as missing:
        sdk.pages.retrieve(page_id=page)
    assert missing.value.code == APIErrorCode.ObjectNotFound and missing.value.status == 404

    server.fail(SEARCH, "429", retry_after=1)
    with pytest.raises(APIResponseError) as limited:
        sdk.search()
    assert limited.value.code == APIErrorCode.RateLimited
    assert limited.value.headers["retry-after"] == "1"

    # notion-client 3.1 has no constant for 529: it raises its generic HTTP error, whose
    # status, Retry-After and body are Notion's.
    server.fail(SEARCH, "529", retry_after=1)
    with pytest.raises(HTTPResponseError) as overloaded:
        sdk.search()
    assert overloaded.value.status == 529 and overloaded.value.headers["retry-after"] == "1"
    assert json.loads(overloaded.value.body)["code"] == "service_overload"

    stranger = Client(auth="wrong", base_url=server.base_url, notion_version="2022-06-28")
    with pytest.raises(APIResponseError) as denied:
        stranger.search()
    assert denied.value.code == APIErrorCode.Unauthorized
