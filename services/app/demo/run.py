"""The demo: a bundled sample knowledge base ingested through the real API, then searched.

:func:`run_demo` serves the sample website on loopback, provisions an API key for the demo
organization, finds or creates the knowledge base ``Nimbus sample knowledge base``, uploads
the sample files (multipart) and adds each published page of the website as a URL
document, prints progress until every document is ``ready`` or ``failed``, then runs a few
searches and prints their best hits. Re-running it reuses the knowledge base and replaces
the documents by name (an unchanged document embeds nothing).

The pages are on 127.0.0.1, which the crawler's SSRF guard refuses unless
``SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true``; ``speedtier up --demo`` sets it for the
processes of that run only. :class:`DemoThread` runs the demo next to ``speedtier up``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from services.app.demo.client import IngestionClient, content_type_of
from services.app.demo.website import SampleWebsite, discover_pages
from shared import progress
from shared.errors import SpeedtierError

FILES_DIR = Path(__file__).resolve().parent / "samples" / "files"
KNOWLEDGE_BASE = "Nimbus sample knowledge base"
DEMO_ORGANIZATION_ID = 1
KEY_NAME = "speedtier demo"
#: Keywords rather than questions: full-text search matches every word of the query.
QUERIES = ("factory reset", "frost protection threshold", "soil probe battery life")
PRIVATE_NETWORKS_NOTE = (
    "the sample website is on 127.0.0.1: its pages are fetched only because this run's "
    "workers have SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true (demo only; the crawler's SSRF "
    "guard refuses private addresses by default)"
)
SNIPPET_CHARS = 150

Say = Callable[[str], None]


class DemoStopped(SpeedtierError):
    """The system is stopping; the demo gives up quietly."""


@dataclass
class DemoResult:
    """What the demo did: documents by final status and the hits of each query."""

    knowledge_base_id: int
    documents: dict[str, str] = field(default_factory=dict)
    hits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def ready(self) -> int:
        return sum(status == "ready" for status in self.documents.values())


def _sleep(stop: threading.Event | None, seconds: float) -> None:
    if stop is None:
        time.sleep(seconds)
    elif stop.wait(seconds):
        raise DemoStopped


def wait_until_ready(
    client: IngestionClient, *, timeout: float, stop: threading.Event | None = None
) -> None:
    """Wait for the API to answer ``/readyz``. Raises TimeoutError."""
    deadline = time.monotonic() + timeout
    while not client.is_ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the API at {client.api_url} was not ready within {timeout:.0f} s")
        _sleep(stop, 0.5)


def page_name(url: str) -> str:
    """A URL document's name: its path, so a re-run on another port replaces it."""
    return "website" + urlsplit(url).path


def submit_samples(
    client: IngestionClient, base_id: int, site: SampleWebsite, say: Say
) -> dict[int, dict[str, Any]]:
    """Upload every sample file and add every published page; document id -> the API's
    answer (202, the document in ``processing``)."""
    submitted: dict[int, dict[str, Any]] = {}
    replaced = 0
    for path in sorted(FILES_DIR.iterdir()):
        if path.name.startswith("."):
            continue
        accepted = client.upload_file(base_id, path)
        submitted[accepted["id"]] = accepted
        replaced += accepted["replaced"]
        size = path.stat().st_size / 1024
        kind = content_type_of(path)
        say(f"uploaded {path.name} ({kind}, {size:.1f} kB) as document {accepted['id']}")
    pages, disallowed = discover_pages(site.home_url)
    for url in disallowed:
        say(f"robots.txt disallows {urlsplit(url).path}: not added")
    for url in pages:
        accepted = client.add_url(base_id, url, name=page_name(url))
        submitted[accepted["id"]] = accepted
        replaced += accepted["replaced"]
    say(f"added {len(pages)} website pages as URL documents ({site.base_url}...)")
    if replaced:
        say(
            f"{replaced} of {len(submitted)} documents replaced documents of the same name "
            "from an earlier run (same id; unchanged content is not embedded again)"
        )
    return submitted


def watch_progress(
    client: IngestionClient,
    base_id: int,
    submitted: dict[int, dict[str, Any]],
    say: Say,
    *,
    timeout: float,
    stop: threading.Event | None = None,
    show_progress: bool = False,
) -> dict[str, str]:
    """Poll the documents until each is ready or failed, printing progress as it changes
    (and, with ``show_progress`` on a terminal, a bar on stderr); returns name -> final
    status (``processing`` for those still going at the timeout)."""
    started = time.monotonic()
    last = ""
    done = 0
    with progress.steps(
        "ingesting", len(submitted), force=None if show_progress else False
    ) as step:
        while True:
            documents = [d for d in client.documents(base_id) if d["id"] in submitted]
            ready = [d for d in documents if d["status"] == "ready"]
            failed = [d for d in documents if d["status"] == "failed"]
            step(len(ready) + len(failed) - done)
            done = len(ready) + len(failed)
            line = f"ingested {len(ready)}/{len(submitted)} ready, {len(failed)} failed"
            settled = done == len(submitted)
            elapsed = time.monotonic() - started
            if line != last or settled:
                say(line + (f" ({elapsed:.1f} s)" if settled else ""))
                last = line
            if settled or elapsed > timeout:
                break
            _sleep(stop, 0.5)
    for document in failed:
        say(f"failed: {document['name']}: {document['failure_reason']}")
        if document["kind"] == "url" and "unreachable" in (document["failure_reason"] or ""):
            say("  (were the workers started with SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true?)")
    if not settled:
        still = sorted(d["name"] for d in documents if d["status"] == "processing")
        say(f"still processing after {timeout:.0f} s: {', '.join(still)}")
    again = [d for d in ready if submitted[d["id"]]["replaced"]]
    if again:
        unchanged = sum(
            d["current_version"] == submitted[d["id"]]["current_version"] for d in again
        )
        say(
            f"re-submitted documents: {unchanged} unchanged (same content, nothing embedded), "
            f"{len(again) - unchanged} changed (a new version each)"
        )
    return {d["name"]: d["status"] for d in documents}


def one_line(text: str, limit: int = SNIPPET_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def run_searches(
    client: IngestionClient,
    base_id: int,
    names: dict[int, str],
    queries: Sequence[str],
    say: Say,
) -> dict[str, list[dict[str, Any]]]:
    """Run each query and print its best hits; query -> hits."""
    results = {}
    for query in queries:
        hits = client.search(base_id, query, top_k=3)
        results[query] = hits
        say(f'search "{query}": {len(hits)} hits')
        for rank, hit in enumerate(hits, 1):
            name = names.get(hit["document_id"], f"document {hit['document_id']}")
            say(f'  {rank}. {hit["score"]:.4f}  {name}  "{one_line(hit["snippet"])}"')
    return results


def run_demo(
    api_url: str,
    *,
    internal_token: str | None = None,
    say: Say = print,
    stop: threading.Event | None = None,
    ready_timeout: float = 120.0,
    ingest_timeout: float = 180.0,
    queries: Sequence[str] = QUERIES,
    state_dir: Path | None = None,
    show_progress: bool = False,
) -> DemoResult:
    """Run the demo against the API at ``api_url`` and return what it did.

    Parameters:
      internal_token: the API's ``INTERNAL_API_TOKEN``, if it has one.
      say: receives each line of output.
      stop: set when the system stops; the demo then raises :class:`DemoStopped`.
      state_dir: where the demo keeps the sample site's port (the same URLs on every run)
        and the API key (``demo-api-key``, mode 0600, which the closing curl hint reads
        rather than printing the key); nothing is kept without it.
      show_progress: a progress bar on stderr while documents ingest (on a terminal only).

    Raises:
      client.ApiError: the API refused a call.
      TimeoutError: the API did not get ready.
    """
    client = IngestionClient(api_url, internal_token=internal_token)
    try:
        wait_until_ready(client, timeout=ready_timeout, stop=stop)
        port_file = state_dir / "demo-site-port" if state_dir is not None else None
        with SampleWebsite(port_file=port_file) as site:
            say(f"sample website serving on {site.base_url}")
            say(PRIVATE_NETWORKS_NOTE)
            key = client.provision_key(DEMO_ORGANIZATION_ID, KEY_NAME)
            say(
                f"API key {key['key'][:10]}… provisioned for organization "
                f"{DEMO_ORGANIZATION_ID} (POST /internal/ingestion/api_keys)"
            )
            base, created = client.knowledge_base_named(KNOWLEDGE_BASE)
            verb = "created" if created else "reused"
            say(f'knowledge base "{KNOWLEDGE_BASE}" {verb} (id {base["id"]})')
            submitted = submit_samples(client, base["id"], site, say)
            result = DemoResult(base["id"])
            result.documents = watch_progress(
                client,
                base["id"],
                submitted,
                say,
                timeout=ingest_timeout,
                stop=stop,
                show_progress=show_progress,
            )
            names = {id_: accepted["name"] for id_, accepted in submitted.items()}
            result.hits = run_searches(client, base["id"], names, queries, say)
        say(
            f"demo done: {result.ready}/{len(submitted)} documents ready; try it yourself with "
            f'curl -H "Authorization: Bearer {key_reference(key["key"], state_dir)}" '
            "-H 'Content-Type: application/json' "
            f'-d \'{{"query": "warranty"}}\' {client.api_url}/knowledge-bases/{base["id"]}/search'
        )
        return result
    finally:
        client.close()


def key_reference(key: str, state_dir: Path | None) -> str:
    """How the curl hint names the API key without printing it: ``$(cat <file>)`` of a file
    only this user can read, or a variable to set when there is no state directory."""
    if state_dir is None:
        return "$SPEEDTIER_DEMO_KEY"
    path = state_dir / "demo-api-key"
    state_dir.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(key + "\n")
    return f"$(cat {path})"


class DemoThread:
    """:func:`run_demo` in a daemon thread, next to a running system (``speedtier up``).

    A failure is reported through ``say``, never raised: the system keeps running.
    """

    def __init__(
        self,
        api_url: str,
        *,
        internal_token: str | None,
        say: Say,
        state_dir: Path | None = None,
    ) -> None:
        self.say = say
        self.state_dir = state_dir
        self.result: DemoResult | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(api_url, internal_token), name="demo", daemon=True
        )

    def start(self) -> DemoThread:
        self._thread.start()
        return self

    def _run(self, api_url: str, internal_token: str | None) -> None:
        try:
            self.result = run_demo(
                api_url,
                internal_token=internal_token,
                say=self.say,
                stop=self._stop,
                state_dir=self.state_dir,
            )
        except DemoStopped:
            pass
        except Exception as exc:
            self.error = exc
            if not self._stop.is_set():
                self.say(f"demo failed: {exc}")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop waiting and polling (a request in flight finishes first)."""
        self._stop.set()
        self._thread.join(timeout)
