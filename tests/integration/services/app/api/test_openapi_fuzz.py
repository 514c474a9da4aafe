"""Schemathesis over every operation of the OpenAPI document, in process (WSGI), against a
real PostgreSQL database of its own and the real Redis: no answer may be a 5xx, and every
answer must be one the document declares (status, content type, body schema).

Both credentials are configured (the internal token, and an organization's API key that
owns a knowledge base with a document), so operations are exercised past 401. Each operation
gets :data:`MAX_EXAMPLES` generated cases drawn from valid data, invalid data (NUL characters
included) and valid data aimed at the records that exist, through schemathesis' Hypothesis
strategies (``APIOperation.as_strategy``); deletions run last. Its pytest plugin
(``schema.parametrize``) is not used: 4.32 cannot run under pytest 9.2 (it sets
``Item._nodeid``, which pytest no longer has).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from services.app.api import create_app
from services.ingestion import store
from services.ingestion.families import ingest_request
from shared.db.migrate import upgrade
from tests.fixtures_db import create_database, drop_database
from tests.fixtures_platform import MakePlatform

TOKEN = "fuzz-internal-token"
INTERNAL = {"Authorization": f"Bearer {TOKEN}"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Cases per operation: with the document's 21 operations, about 570 requests, some 7 s on
#: 2 cores.
MAX_EXAMPLES = 30
FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Fuzzed:
    """The loaded document and the records the API key's organization owns."""

    schema: Any
    existing: dict[str, Any]


@dataclass
class Run:
    """What the fuzzer saw."""

    statuses: Counter[int] = field(default_factory=Counter)
    by_operation: dict[str, Counter[int]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def record(self, label: str, status: int) -> None:
        self.statuses[status] += 1
        self.by_operation.setdefault(label, Counter())[status] += 1


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
        database_url=fuzz_database_url, internal_api_token=TOKEN, api_max_body_bytes=64 * 1024
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
        existing: dict[str, Any] = {
            "knowledge_base_id": base.id,
            "document_id": added.document.id,
        }
    job = platform.router.enqueue(ingest_request(organization_id, added.document.id, base.id))
    existing["job_id"] = job.job_id
    # A registered webhook route (the signature check then answers 401 or 404, never a 5xx).
    existing.update(source="github", path="events")
    config = schemathesis.Config.from_dict(
        {"auth": {"openapi": {"bearerAuth": {"bearer": TOKEN}, "apiKeyAuth": {"bearer": key}}}}
    )
    app = create_app(platform)
    document = app.test_client().get("/internal/openapi.json", headers=INTERNAL).json
    # Loaded from the document itself rather than its URL: schemathesis leaves out the
    # operation it loads the schema from, and this one is a route like the others.
    schema = schemathesis.openapi.from_dict(document, config=config)
    schema.app = app
    return Fuzzed(schema, existing)


def fuzz(operation: Any, existing: dict[str, Any], run: Run) -> None:
    """Valid and invalid cases for one operation; the first failure is kept."""
    modes = [operation.as_strategy(GenerationMode.POSITIVE)]
    if operation.path_parameters or operation.query or operation.body:
        modes.append(operation.as_strategy(GenerationMode.NEGATIVE))
    names = re.findall(r"{(\w+)}", operation.path)
    known = {name: existing[name] for name in names if name in existing}
    if known:
        modes.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=known))

    @FUZZ_SETTINGS
    @given(case=st.one_of(modes))
    def check(case: schemathesis.Case) -> None:
        response = case.call_and_validate(checks=CHECKS)
        run.record(operation.label, response.status_code)

    try:
        check()
    except (Exception, BaseExceptionGroup) as exc:  # keep the report, go on with the others
        run.failures[operation.label] = describe(exc)


def describe(failure: BaseException) -> str:
    """A failure's report: schemathesis' own for a failed check (the status or schema found,
    and a curl line to reproduce it), else the exception."""
    parts = [str(failure)]
    if isinstance(failure, BaseExceptionGroup):
        parts += [f"{type(e).__name__}: {e}" for e in failure.exceptions]
    return "\n".join(parts)[:2000]


def test_every_answer_is_documented_and_none_is_a_5xx(fuzzed: Fuzzed) -> None:
    run = Run()
    operations = [result.ok() for result in fuzzed.schema.get_all_operations()]
    operations.sort(key=lambda operation: operation.method.upper() == "DELETE")

    for operation in operations:
        fuzz(operation, fuzzed.existing, run)

    print(f"\n{sum(run.statuses.values())} cases over {len(operations)} operations: {run.statuses}")
    for label, seen in sorted(run.by_operation.items()):
        print(label, dict(seen))
    assert not run.failures, "\n\n".join(f"{op}: {report}" for op, report in run.failures.items())
    # Every operation of the document was called (the products' routes included).
    assert len(operations) == len(run.by_operation)
    assert {"POST /internal/jobs/enqueue", "POST /webhooks/{source}/{path}"} <= set(
        run.by_operation
    )
    assert not any(status >= 500 for status in run.statuses)
    # The credentials work: authenticated operations answer beyond 401.
    for label in ("GET /knowledge-bases", "POST /internal/ingestion/api_keys", "GET /readyz"):
        assert any(200 <= s < 300 for s in run.by_operation[label]), run.by_operation[label]
    assert run.statuses[400] > 0 and run.statuses[404] > 0
