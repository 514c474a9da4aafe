"""``POST /internal/knowledge_base_sync/enqueue`` against real Redis, PostgreSQL and workers:
auth, per-item validation, the seed's job ids and outcomes, provider routing, cross-tenant
ids, and no 202 while Redis is down."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from services.app.api import create_app
from services.app.bootstrap import Platform
from shared.db.models import KnowledgeBaseSource
from testkit.ports import free_port
from tests.fixtures_platform import AUTH, MakePlatform
from tests.integration.services.knowledge_sync.factories import (
    Kb,
    finished,
    knowledge_sync_settings,
    queued_messages,
    running_workers,
    state,
    wait_for,
)

PATH = "/internal/knowledge_base_sync/enqueue"
URL = "https://docs.test/guide/intro"


def post(client: FlaskClient, requests: list[dict[str, Any]], headers: Any = AUTH) -> Any:
    return client.post(
        PATH,
        data=json.dumps({"requests": requests}),
        headers={**headers, "Content-Type": "application/json"},
    )


def job_keys(platform: Platform) -> list[bytes]:
    ns = platform.settings.redis_namespace
    return list(platform.broker.client.scan_iter(match=f"{ns}:job:kb-*"))


def url_job_id(task: int, url: str) -> str:
    return f"kb-crawl-url-{task}-{hashlib.sha256(url.encode()).hexdigest()[:24]}"


# -- authentication -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic secret"}],
    ids=["no token", "wrong token", "not bearer"],
)
def test_the_route_needs_the_internal_token(
    client: FlaskClient, platform: Platform, headers: dict[str, str]
) -> None:
    response = post(
        client, [{"kind": "sync_source", "organization_id": 1, "source_id": 1}], headers
    )

    assert response.status_code == 401
    assert response.json["error"] == "unauthorized"
    assert job_keys(platform) == []


# -- validation -----------------------------------------------------------------------------

GOOD = {"kind": "sync_document_chunks", "organization_id": 1, "document_id": 1}

BAD_ITEMS = [
    ("source id misnamed", {"kind": "sync_source", "id": 5}, ["source_id", "id"]),
    ("source id missing", {"kind": "sync_source"}, ["source_id"]),
    ("source id not a number", {"kind": "sync_source", "source_id": "five"}, ["source_id"]),
    ("source id zero", {"kind": "sync_source", "source_id": 0}, ["source_id"]),
    (
        "document id misnamed",
        {"kind": "sync_document", "documentId": 5},
        ["document_id", "documentId"],
    ),
    ("document id negative", {"kind": "sync_document", "document_id": -3}, ["document_id"]),
    (
        "chunks id misnamed",
        {"kind": "sync_document_chunks", "source_id": 5},
        ["document_id", "source_id"],
    ),
    ("chunks id missing", {"kind": "sync_document_chunks"}, ["document_id"]),
    ("crawl task misnamed", {"kind": "start_crawl", "task_id": 5}, ["crawl_task_id", "task_id"]),
    ("crawl url missing url", {"kind": "crawl_url", "crawl_task_id": 5}, ["url"]),
    ("crawl url missing task", {"kind": "crawl_url", "url": URL}, ["crawl_task_id"]),
    (
        "crawl url not a url",
        {"kind": "crawl_url", "crawl_task_id": 5, "url": "docs.test/x"},
        ["url"],
    ),
    (
        "crawl url not http",
        {"kind": "crawl_url", "crawl_task_id": 5, "url": "ftp://docs.test/x"},
        ["url"],
    ),
    (
        "parent url not a url",
        {"kind": "crawl_url", "crawl_task_id": 5, "url": URL, "parent_url": "nope"},
        ["parent_url"],
    ),
    (
        "parent url misnamed",
        {"kind": "crawl_url", "crawl_task_id": 5, "url": URL, "parentUrl": URL},
        ["parentUrl"],
    ),
    (
        "depth negative",
        {"kind": "crawl_url", "crawl_task_id": 5, "url": URL, "depth": -1},
        ["depth"],
    ),
    (
        "depth not a number",
        {"kind": "crawl_url", "crawl_task_id": 5, "url": URL, "depth": "deep"},
        ["depth"],
    ),
    ("kind of another service", {"kind": "tick:kb-sync", "slot": "x"}, ["kind"]),
    ("unknown kind", {"kind": "sync_everything", "source_id": 5}, ["kind"]),
    ("unknown provider field", {"kind": "sync_source", "source_id": 5, "typ": "x"}, ["typ"]),
]


@pytest.mark.parametrize(
    ("item", "fields"), [case[1:] for case in BAD_ITEMS], ids=[case[0] for case in BAD_ITEMS]
)
def test_a_bad_item_is_a_400_naming_its_field_and_none_of_the_batch_is_accepted(
    client: FlaskClient, platform: Platform, item: dict[str, Any], fields: list[str]
) -> None:
    response = post(client, [GOOD, {"organization_id": 1, **item}, GOOD])

    assert response.status_code == 400, response.json
    assert response.json["error"] == "invalid_request"
    assert sorted(response.json["fields"]) == sorted(f"requests[1].{f}" for f in fields)
    assert job_keys(platform) == []


def test_an_out_of_range_id_is_a_400_not_a_500(client: FlaskClient, platform: Platform) -> None:
    too_big = 2**63
    response = post(
        client,
        [
            GOOD,
            {"kind": "sync_source", "organization_id": 1, "source_id": too_big},
            {"kind": "sync_document", "organization_id": 1, "document_id": too_big},
            {"kind": "start_crawl", "organization_id": 1, "crawl_task_id": too_big},
        ],
    )

    assert response.status_code == 400, response.json
    assert sorted(response.json["fields"]) == [
        "requests[1].source_id",
        "requests[2].document_id",
        "requests[3].crawl_task_id",
    ]
    assert job_keys(platform) == []


def test_an_organization_id_is_required_on_every_item(
    client: FlaskClient, platform: Platform
) -> None:
    response = post(
        client, [GOOD, {"kind": "sync_source", "organization_id": None, "source_id": 1}]
    )

    assert response.status_code == 400
    assert list(response.json["fields"]) == ["requests[1].organization_id"]
    assert job_keys(platform) == []


# -- 202: ids, outcomes, routing ------------------------------------------------------------


def test_202_answers_the_seed_job_ids_on_the_provider_tier(
    client: FlaskClient, platform: Platform, kb: Kb
) -> None:
    org = kb.organization()
    notion_ods = kb.data_source(org, "notion", {"api_token": "t"})
    zendesk_ods = kb.data_source(org, "zendesk", {"email": "e", "api_token": "t"})
    notion = kb.source(org, "notion", ods=notion_ods)
    zendesk = kb.source(org, "zendesk", ods=zendesk_ods)
    article = kb.document(org, zendesk, source_type="zendesk", identifier="7:en-us")
    page = kb.document(org, notion, source_type="notion", identifier="p-1")
    task = kb.crawl_task(org, kb.source(org, "url", settings={"url": URL}), URL)

    response = post(
        client,
        [
            {"kind": "sync_source", "organization_id": org, "source_id": notion},
            {"kind": "sync_source", "organization_id": org, "source_id": zendesk},
            {"kind": "sync_document", "organization_id": org, "document_id": page},
            {"kind": "sync_document", "organization_id": org, "document_id": article},
            {"kind": "sync_document_chunks", "organization_id": org, "document_id": page},
            {"kind": "start_crawl", "organization_id": org, "crawl_task_id": task},
            {
                "kind": "crawl_url",
                "organization_id": org,
                "crawl_task_id": task,
                "url": URL,
                "parent_url": "https://docs.test/",
                "depth": 1,
            },
        ],
    )

    assert response.status_code == 202, response.json
    assert [(j["job_id"], j["queue"], j["outcome"]) for j in response.json["jobs"]] == [
        (f"kb-source-sync-{notion}", "kb_source_sync.slow", "added"),
        (f"kb-source-sync-{zendesk}", "kb_source_sync.fast", "added"),
        (f"kb-document-sync-{page}", "kb_document_sync.slow", "added"),
        (f"kb-document-sync-{article}", "kb_document_sync.fast", "added"),
        (f"kb-document-chunks-{page}", "kb_document_chunks.fast", "added"),
        (f"kb-crawl-start-{task}", "kb_crawl_start.slow", "added"),
        (url_job_id(task, URL), "kb_crawl_url.slow", "added"),
    ]
    assert [j["kind"] for j in response.json["jobs"]] == [
        "sync_source",
        "sync_source",
        "sync_document",
        "sync_document",
        "sync_document_chunks",
        "start_crawl",
        "crawl_url",
    ]
    # The route looked each source and document up in its organization: the messages carry
    # the provider and the data source that key the seed's windows.
    (notion_message,) = queued_messages(platform, "kb_source_sync.slow")
    assert notion_message["options"]["st_provider"] == "notion"
    assert notion_message["options"]["st_scope"] == f"ods-{notion_ods}"
    assert notion_message["kwargs"]["organization_id"] == org
    (article_message,) = queued_messages(platform, "kb_document_sync.fast")
    assert article_message["options"]["st_provider"] == "zendesk"
    assert article_message["options"]["st_scope"] == f"ods-{zendesk_ods}"


def test_a_second_request_deduplicates_and_a_finished_job_is_replaced(
    client: FlaskClient, platform: Platform, kb: Kb
) -> None:
    org = kb.organization()
    document = kb.document(org, None, source_type="notion", content="Standalone text.")
    item = {"kind": "sync_document_chunks", "organization_id": org, "document_id": document}
    job_id = f"kb-document-chunks-{document}"

    first, again = post(client, [item]), post(client, [item, item])

    assert first.json["jobs"][0]["outcome"] == "added"
    assert [j["outcome"] for j in again.json["jobs"]] == ["deduplicated", "deduplicated"]
    assert len(queued_messages(platform, "kb_document_chunks.fast")) == 1

    with running_workers(platform):
        wait_for(lambda: state(platform, job_id) == "completed")
        replaced = post(client, [item])
        assert replaced.status_code == 202
        assert replaced.json["jobs"][0] == {
            "job_id": job_id,
            "outcome": "replaced",
            "queue": "kb_document_chunks.fast",
            "kind": "sync_document_chunks",
        }
        wait_for(lambda: state(platform, job_id) == "completed")
    assert len(kb.chunks(document)) >= 1


def test_a_cross_tenant_source_is_accepted_and_completes_as_record_missing(
    client: FlaskClient, platform: Platform, kb: Kb
) -> None:
    owner, other = kb.organization("Owner"), kb.organization("Other")
    ods = kb.data_source(owner, "notion", {"api_token": "t"})
    source = kb.source(owner, "notion", ods=ods)
    before = kb.snapshot(owner)

    response = post(
        client, [{"kind": "sync_source", "organization_id": other, "source_id": source}]
    )

    assert response.status_code == 202
    (job,) = response.json["jobs"]
    assert job["job_id"] == f"kb-source-sync-{source}"
    # Routing learnt nothing about another tenant's source: no provider, no data source.
    (message,) = queued_messages(platform, job["queue"])
    assert "st_provider" not in message["options"]
    assert message["kwargs"]["organization_id"] == other
    with running_workers(platform):
        wait_for(lambda: finished(platform, job["job_id"]))
    assert state(platform, job["job_id"]) == "record_missing"
    assert kb.snapshot(owner) == before
    assert kb.get(KnowledgeBaseSource, source).sync_status == "pending"


# -- Redis down -----------------------------------------------------------------------------


class RedisServer:
    """A private ``redis-server`` on a free port, killed on demand."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(directory)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        probe = redis.Redis.from_url(self.url)
        try:
            wait_for(lambda: _answers(probe), timeout=10)
        finally:
            probe.close()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    yield server
    server.kill()


def test_503_and_no_202_while_redis_is_down(
    redis_server: RedisServer, make_platform: MakePlatform, kb: Kb
) -> None:
    platform = make_platform(redis_url=redis_server.url, **knowledge_sync_settings())
    client = create_app(platform).test_client()
    org = kb.organization()
    source = kb.source(org, "zendesk")
    item = {"kind": "sync_source", "organization_id": org, "source_id": source}
    assert post(client, [item]).status_code == 202

    redis_server.kill()
    response = post(client, [item, {**GOOD, "organization_id": org}])

    assert response.status_code == 503
    assert response.json["error"] == "queue_unavailable"
    assert "jobs" not in response.json
