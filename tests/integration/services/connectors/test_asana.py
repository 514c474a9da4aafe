"""Asana: the fake driven by the official ``asana`` SDK, then the connector against it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import asana
import pytest
import redis
from asana.rest import ApiException

from services.connectors import asana as connector
from services.connectors.nodes import Connection, NodeRef, RateLimitState
from shared.errors import Delay, JobError, Unrecoverable
from testkit.fakes.asana_server import AsanaServer
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

TOKEN = "2/asana-fake"


@pytest.fixture
def server() -> Iterator[AsanaServer]:
    fake = AsanaServer(TOKEN)
    with fake:
        yield fake


@pytest.fixture
def conn(server: AsanaServer) -> Connection:
    return Connection(
        source="asana",
        connection_id=61,
        organization_id=6,
        base_url=server.base_url,
        credentials={"access_token": TOKEN},
        settings={},
        timeout=2.0,
    )


def walk_all(
    conn: Connection, root: NodeRef, since: str | None = None
) -> tuple[list[NodeRef], str | None]:
    refs: list[NodeRef] = []
    checkpoint: str | None = None
    while True:
        page = connector.SOURCE.walk(conn, root, checkpoint, since)
        refs += page.refs
        checkpoint = page.checkpoint
        if checkpoint is None:
            return refs, page.watermark


def _sdk(server: AsanaServer, token: str = TOKEN) -> asana.ApiClient:
    configuration = asana.Configuration()
    configuration.host = f"{server.base_url}/api/1.0"
    configuration.access_token = token
    return asana.ApiClient(configuration)


def test_the_sdk_pages_tasks_and_reads_stories(server: AsanaServer) -> None:
    project = server.populate("Roadmap", tasks=150, comments=2)
    client = _sdk(server)
    projects = list(
        asana.ProjectsApi(client).get_projects({"workspace": "1100000000000001", "limit": 10})
    )
    assert [p["gid"] for p in projects] == [project]
    tasks = list(
        asana.TasksApi(client).get_tasks(
            {"project": project, "limit": 100, "opt_fields": "name,modified_at"}
        )
    )
    assert len(tasks) == 150  # two pages through next_page.offset
    assert len(server.requests_to("/api/1.0/tasks")) == 2
    stories = list(
        asana.StoriesApi(client).get_stories_for_task(tasks[0]["gid"], {"opt_fields": "type,text"})
    )
    assert [s["text"] for s in stories if s["type"] == "comment"] == [
        "Comment 0 on task 0",
        "Comment 1 on task 0",
    ]
    with pytest.raises(ApiException) as missing:
        asana.TasksApi(client).get_task("404", {})
    assert missing.value.status == 404
    with pytest.raises(ApiException) as refused:
        list(asana.TasksApi(_sdk(server, "wrong")).get_tasks({"project": project, "limit": 5}))
    assert refused.value.status == 401


def test_list_roots(server: AsanaServer, conn: Connection) -> None:
    first, second = server.populate("A", tasks=1), server.populate("B", tasks=1)
    assert connector.SOURCE.list_roots(conn) == [
        NodeRef("AsanaProject", first),
        NodeRef("AsanaProject", second),
    ]


def test_walk_then_only_changes(server: AsanaServer, conn: Connection) -> None:
    project = server.populate("Roadmap", tasks=230)
    root = NodeRef("AsanaProject", project)
    refs, watermark = walk_all(conn, root)
    assert len(refs) == 230 and len(set(refs)) == 230 and watermark is not None
    time.sleep(1.1)  # the watermark is the provider's Date header, to the second
    gid = refs[7].node_id
    server.touch(gid, "new notes")
    changed, _ = walk_all(conn, root, since=watermark)
    assert changed == [NodeRef("AsanaTask", gid)]


def test_fetch_folds_comments(server: AsanaServer, conn: Connection) -> None:
    project = server.populate("Roadmap", tasks=2, comments=2)
    gid = next(t.gid for t in server.tasks.values() if t.project == project)
    node = connector.SOURCE.fetch(conn, NodeRef("AsanaTask", gid))
    assert node is not None and node.title == "Task 0"
    assert node.text == "Notes of task 0.\n\nAda: Comment 0 on task 0\n\nAda: Comment 1 on task 0"
    assert connector.SOURCE.fetch(conn, NodeRef("AsanaTask", "999")) is None


def test_bad_credentials_are_unrecoverable(server: AsanaServer, conn: Connection) -> None:
    with pytest.raises(Unrecoverable, match="401"):
        connector.SOURCE.list_roots(replace(conn, credentials={"access_token": "x"}))
    with pytest.raises(Unrecoverable, match="no access_token"):
        connector.SOURCE.list_roots(replace(conn, credentials={}))


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [case[1:] for case in TRANSIENT_FAILURES],
    ids=[case[0] for case in TRANSIENT_FAILURES],
)
def test_transient_failures(
    server: AsanaServer,
    conn: Connection,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    root = NodeRef("AsanaProject", server.populate("Roadmap", tasks=3))
    server.fail("/api/1.0/tasks", kind, **options)
    with pytest.raises(error):
        connector.SOURCE.walk(conn, root, None)
    assert len(connector.SOURCE.walk(conn, root, None).refs) == 3


def test_429_delays_by_retry_after_and_blocks_the_connection(
    server: AsanaServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    conn = replace(conn, rate_limits=RateLimitState(redis_client, namespace))
    root = NodeRef("AsanaProject", server.populate("Roadmap", tasks=3))
    server.rate_limit, server.rate_window = 1, 60
    connector.SOURCE.walk(conn, root, None)
    with pytest.raises(Delay) as caught:
        connector.SOURCE.walk(conn, root, None)
    assert 50 < caught.value.until - time.time() <= 61
    assert conn.rate_limits is not None and conn.rate_limits.blocked_until(conn) is not None
