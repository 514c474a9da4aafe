"""What a process loads only when it first needs it: bs4 and markdownify (about 6 MiB) with
the first page converted, dulwich (3.7 MiB) with the first Git walk, slack_sdk (1.6 MiB)
with the first report posted, semantic-text-splitter (2.3 MiB) with the first split,
feedparser (2 MiB) with the first feed read, cryptography's Fernet with the first credentials opened
(``test_credentials.py``); the product modules a worker, the API and the scheduler import
at bootstrap do not load them."""

from __future__ import annotations

from pathlib import Path

from tests.fresh_process import printed_by as loaded_after


def test_html_conversion_libraries_load_at_the_first_conversion() -> None:
    script = (
        "import sys\n"
        "import services.connectors.registry, services.indexing.extract, services.web.fetch\n"
        "import services.connectors.confluence, services.connectors.scribe\n"
        "import services.connectors.zendesk_listing, services.ingestion.feeds\n"
        "print('bs4' in sys.modules, 'markdownify' in sys.modules)\n"
        "from services.web.html import extract_html\n"
        "title, text, links = extract_html('<title>T</title><h1>Hi</h1>', 'https://a.test/')\n"
        "print('bs4' in sys.modules, 'markdownify' in sys.modules, text.startswith('# Hi'))\n"
    )
    assert loaded_after(script) == ["False", "False", "True", "True", "True"]


def test_confluence_pages_and_listings_convert_as_before() -> None:
    from services.connectors.confluence_storage import storage_to_markdown
    from services.connectors.zendesk_listing import html_to_markdown

    assert html_to_markdown("<h2>Refunds</h2><ul><li>one</li></ul>") == "## Refunds\n\n- one"
    assert storage_to_markdown("<p>Kept</p><ac:structured-macro ac:name='toc'/>") == "Kept\n"


def test_git_and_slack_clients_load_at_their_first_use(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "import services.connectors.git_repository, services.super_sources.sources\n"
        "import services.reports.slack\n"
        "print('dulwich' in sys.modules, 'slack_sdk' in sys.modules)\n"
        "from services.connectors.git_repository import SOURCE\n"
        "from services.connectors.nodes import Connection, NodeRef\n"
        "from shared.egress.addresses import address_guard\n"
        "from shared.egress.addresses import set_default_guard\n"
        "set_default_guard(address_guard(False, ['127.0.0.1/32']))  # a local repository\n"
        f"conn = Connection('git', 1, 1, '', {{}}, {{'cache_dir': {str(tmp_path)!r}}})\n"
        "try:\n"
        f"    SOURCE.walk(conn, NodeRef('GitRepository', {str(tmp_path / 'none')!r}), None)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
        "print('dulwich' in sys.modules)\n"
    )
    # The first walk (of a path that holds no repository: NotFound) loads dulwich.
    assert loaded_after(script) == ["False", "False", "NotFound", "True"]


def test_the_splitter_and_feedparser_load_at_their_first_use() -> None:
    script = (
        "import sys\n"
        "import services.indexing.chunking, services.ingestion.feeds\n"
        "print('semantic_text_splitter' in sys.modules, 'feedparser' in sys.modules)\n"
        "from services.indexing.chunking import Chunker\n"
        "print(len(Chunker(max_tokens=20, overlap_tokens=2).split('one two three. ' * 20)) > 1)\n"
        "from services.ingestion.feeds import parse_feed\n"
        "rss = b'<rss><channel><item><guid>a</guid><title>T</title>'\n"
        "rss += b'<description>Body</description></item></channel></rss>'\n"
        "print(len(parse_feed(rss, 'https://a.test/feed')))\n"
        "print('semantic_text_splitter' in sys.modules, 'feedparser' in sys.modules)\n"
    )
    assert loaded_after(script) == ["False", "False", "True", "1", "True", "True"]
