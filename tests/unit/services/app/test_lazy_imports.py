"""What a process loads only when it first needs it: bs4 and markdownify (about 6 MiB) with
the first page converted, cryptography's Fernet with the first credentials opened; the
product modules a worker, the API and the scheduler import at bootstrap do not load them."""

from __future__ import annotations

import subprocess
import sys


def loaded_after(script: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()


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
