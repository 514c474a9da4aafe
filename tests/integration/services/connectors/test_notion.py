"""NotionProvider against a local server that speaks the Notion API (and its failures)."""

from __future__ import annotations

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
