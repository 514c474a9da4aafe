"""Schemathesis' engine over the OpenAPI document, every phase and every check: the
document is the validators. Against a real PostgreSQL database of its own and the real Redis,
the app served over HTTP (a werkzeug server in a thread of this process).

Phases: the document's examples, coverage (boundary and just-out-of-bounds values of every
parameter and body field, unexpected methods, missing required headers), fuzzing (Hypothesis,
valid and invalid data) and stateful (sequences through the document's links). Checks: all of
schemathesis' (``schemathesis.checks.CHECKS``), among them a 5xx, an undocumented status,
content type, header or body, an invalid request accepted (``negative_data_rejection``), a
valid one refused (``positive_data_acceptance``), an ``Allow`` header listing another method,
an operation that answers without its credentials (``ignored_auth``), a resource that answers
after its deletion (``use_after_free``). Any failure fails the test with schemathesis' own
report and a curl line to reproduce it: none is accepted. What JSON Schema cannot say is
answered so that the document still holds: a field that contradicts another or the stored
record it names is a documented 409 ``conflicting_fields`` (a pinned ``sync_run_id`` of
another upload, a credential, setting or item id of another provider than the stored
connection's), a URL is the document's pattern, and a multipart field is the text it is on
the wire.

Both credentials are configured (the internal token, and an organization's API key that
owns a knowledge base with a document), so operations are exercised past 401. The engine's
in-process WSGI transport is not used: it hands werkzeug's test client a ``max_redirects``
argument it does not take, and an HTTP server is what production runs anyway.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from schemathesis.checks import CHECKS
from schemathesis.engine import Status, events, from_schema
from werkzeug.serving import make_server

from services.app.api import create_app
from services.ingestion import store
from services.ingestion.families import ingest_request
from shared.db.migrate import upgrade
from tests.fixtures_db import create_database, drop_database
from tests.fixtures_platform import MakePlatform

TOKEN = "fuzz-internal-token"
INTERNAL = {"Authorization": f"Bearer {TOKEN}"}
#: Generated cases per operation and phase: with the document's 40 operations, some 4,000
#: requests, 35 to 90 s on 2 shared cores.
MAX_EXAMPLES = 10
SEED = 30
PHASES = ("examples", "coverage", "fuzzing", "stateful")


@dataclass
class Fuzzed:
    """The loaded document, its app set (``schema.app``)."""

    schema: Any


@dataclass
class Run:
    """What the engine saw."""

    statuses: Counter[int] = field(default_factory=Counter)
    by_operation: dict[str, Counter[int]] = field(default_factory=dict)
    failures: dict[tuple[str, str], str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def scenario(self, event: events.ScenarioFinished) -> None:
        recorder = event.recorder
        for case_id, interaction in recorder.interactions.items():
            if interaction.response is not None:
                status = interaction.response.status_code
                self.statuses[status] += 1
                label = recorder.cases[case_id].value.operation.label
                self.by_operation.setdefault(label, Counter())[status] += 1
        for checks in recorder.checks.values():
            for check in checks:
                if check.status == Status.FAILURE and check.failure_info is not None:
                    info = check.failure_info
                    # a stateful sequence's failure belongs to the step that failed
                    steps = info.steps
                    label = steps[-1].operation if steps else event.label
                    key = (str(label), check.name)
                    report = f"[{event.phase.value}] {info.failure.title}: {info.failure.message}"
                    self.failures.setdefault(key, f"{report}\n{info.code_sample}"[:3000])


@pytest.fixture
def fuzz_database_url() -> Iterator[str]:
    """A migrated database of the fuzzer's own (it writes whatever the schema allows)."""
    database_url = create_database("speedtier_fuzz")
    try:
        upgrade(database_url)
        yield database_url
    finally:
        drop_database(database_url)


@pytest.fixture
def fuzzed(fuzz_database_url: str, make_platform: MakePlatform) -> Fuzzed:
    """The loaded document of an app on a database of its own, both credentials set (the
    database is requested first, so it is dropped after the platform is closed)."""
    platform = make_platform(
        database_url=fuzz_database_url,
        internal_api_token=TOKEN,
        # ignored_auth sends wrong credentials on purpose, hundreds of them from one address
        auth_failure_rate="100000/60",
    )
    organization_id = 10**6 + uuid.uuid4().int % 10**12
    with platform.sessions() as session:
        _, key = store.create_api_key(session, organization_id=organization_id, name="fuzz")
        base = store.create_knowledge_base(session, organization_id=organization_id, name="D")
        added = store.add_document(
            session,
            organization_id=organization_id,
            knowledge_base_id=base.id,
            name="refunds",
            source=store.TextSource("How refunds are handled."),
        )
        session.commit()
    platform.router.enqueue(ingest_request(organization_id, added.document.id, base.id))
    config = schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "auth": {"openapi": {"bearerAuth": {"bearer": TOKEN}, "apiKeyAuth": {"bearer": key}}},
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True},
            "phases": {name: {"enabled": True} for name in PHASES},
            "checks": {check.__name__: {"enabled": True} for check in CHECKS.get_all()},
        }
    )
    app = create_app(platform)
    document = app.test_client().get("/internal/openapi.json", headers=INTERNAL).json
    # Loaded from the document itself rather than its URL: schemathesis leaves out the
    # operation it loads the schema from, and this one is a route like the others.
    schema = schemathesis.openapi.from_dict(document, config=config)
    schema.app = app
    return Fuzzed(schema)


@pytest.fixture
def served(fuzzed: Fuzzed) -> Iterator[str]:
    """The app behind an HTTP server in a thread of this process; its base URL."""
    server = make_server("127.0.0.1", 0, fuzzed.schema.app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_the_document_is_the_validators(fuzzed: Fuzzed, served: str) -> None:
    schema = fuzzed.schema
    schema.app = None
    schema.config.update(base_url=served)
    run = Run()
    started = time.monotonic()

    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            run.scenario(event)
        elif isinstance(event, events.NonFatalError | events.FatalError):
            run.errors.append(f"{event.label}: {event.info.format()}"[:2000])  # type: ignore[union-attr]

    seconds = time.monotonic() - started
    print(f"\n{sum(run.statuses.values())} requests in {seconds:.0f} s: {run.statuses}")
    for label, seen in sorted(run.by_operation.items()):
        print(label, dict(seen))
    assert not run.errors, "\n\n".join(run.errors)
    assert not run.failures, "\n\n".join(
        f"{operation} {check}: {report}" for (operation, check), report in run.failures.items()
    )
    # Every operation of the document was called (the products' routes included)
    operations = [result.ok().label for result in schema.get_all_operations()]
    assert set(operations) <= set(run.by_operation), set(operations) - set(run.by_operation)
    assert not any(status >= 500 for status in run.statuses)
    # The credentials work: authenticated operations answer beyond 401
    for label in ("GET /knowledge-bases", "POST /internal/ingestion/api_keys", "GET /readyz"):
        assert any(200 <= s < 300 for s in run.by_operation[label]), run.by_operation[label]
    assert run.statuses[400] > 0 and run.statuses[404] > 0
