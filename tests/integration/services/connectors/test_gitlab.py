"""GitLab: the fake driven by python-gitlab, then the connector against the fake (and its
failures)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import gitlab
import pytest
import redis

from services.connectors import gitlab as connector
from services.connectors.nodes import Connection, MalformedWebhook, NodeRef, RateLimitState
from shared.errors import Delay, JobError, Unrecoverable
from shared.http import NotFound
from testkit.fakes.gitlab_server import GitlabServer, item_payload, signed_delivery
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

TOKEN = "glpat-fake"
PATH = "group/project"


@pytest.fixture
def server() -> Iterator[GitlabServer]:
    fake = GitlabServer(TOKEN)
    with fake:
        yield fake


@pytest.fixture
def conn(server: GitlabServer) -> Connection:
    return Connection(
        source="gitlab",
        connection_id=31,
        organization_id=3,
        base_url=server.base_url,
        credentials={"token": TOKEN},
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


# -- the fake, as python-gitlab sees it ----------------------------------------------------


def test_python_gitlab_reads_issues_merge_requests_and_notes(server: GitlabServer) -> None:
    server.populate(PATH, issues=130, merge_requests=20, notes=2)
    gl = gitlab.Gitlab(server.base_url, private_token=TOKEN)
    gl.auth()
    project = gl.projects.get(PATH)
    assert project.path_with_namespace == PATH

    issues = project.issues.list(get_all=True, per_page=100, order_by="updated_at", sort="asc")
    assert [i.iid for i in issues] == list(range(1, 131))  # two pages through Link
    paged = project.issues.list(iterator=True, per_page=50)
    assert paged.total == 130 and paged.total_pages == 3
    assert len(project.mergerequests.list(get_all=True)) == 20
    notes = project.issues.get(5).notes.list(get_all=True, sort="asc")
    assert [n.body for n in notes] == ["Note 0 on 5", "Note 1 on 5"]
    after = issues[-3].updated_at
    assert len(project.issues.list(get_all=True, updated_after=after)) == 3

    with pytest.raises(gitlab.GitlabGetError) as missing:
        project.issues.get(999)
    assert missing.value.response_code == 404
    with pytest.raises(gitlab.GitlabAuthenticationError):
        gitlab.Gitlab(server.base_url, private_token="wrong").auth()


def test_python_gitlab_sees_429(server: GitlabServer) -> None:
    server.populate(PATH, issues=1)
    server.rate_limit = 2
    gl = gitlab.Gitlab(server.base_url, private_token=TOKEN)
    project = gl.projects.get(PATH)
    project.issues.get(1)
    with pytest.raises(gitlab.GitlabGetError) as limited:
        project.issues.get(1, obey_rate_limit=False)
    assert limited.value.response_code == 429


# -- the connector -------------------------------------------------------------------------


def test_list_roots(server: GitlabServer, conn: Connection) -> None:
    server.max_per_page = 1
    server.project("a/one")
    server.project("a/two")
    assert [r.node_id for r in connector.SOURCE.list_roots(conn)] == ["1", "2"]
    assert connector.SOURCE.list_roots(replace(conn, settings={"projects": ["a/one"]})) == [
        NodeRef("GitlabProject", "a/one")
    ]


def test_walk_lists_issues_then_merge_requests_once_then_only_changes(
    server: GitlabServer, conn: Connection
) -> None:
    project = server.populate(PATH, issues=150, merge_requests=60)
    root = NodeRef("GitlabProject", str(project.id))
    refs, watermark = walk_all(conn, root)
    assert len(refs) == len(set(refs)) == 210
    assert NodeRef("GitlabMergeRequest", f"{project.id}!60") in refs
    assert watermark == "2026-01-01T02:30:00.000Z"  # issue 150

    server.touch(PATH, "merge_requests", 3)
    again, watermark2 = walk_all(conn, root, since=watermark)
    assert NodeRef("GitlabMergeRequest", f"{project.id}!3") in again
    assert len(again) == 2  # and the boundary issue 150 again (skipped by date at indexing)
    assert watermark2 is not None and watermark2 > watermark


def test_walk_by_path_and_edits_mid_walk(server: GitlabServer, conn: Connection) -> None:
    server.populate(PATH, issues=9)
    conn = replace(conn, settings={"per_page": 2})
    root = NodeRef("GitlabProject", PATH)
    first = connector.SOURCE.walk(conn, root, None)
    server.touch(PATH, "issues", 1)
    refs, checkpoint = list(first.refs), first.checkpoint
    while checkpoint is not None:
        page = connector.SOURCE.walk(conn, root, checkpoint)
        refs += page.refs
        checkpoint = page.checkpoint
    assert {r.node_id for r in refs} == {f"{PATH}#{n}" for n in range(1, 10)}


def test_fetch_renders_description_and_user_notes(server: GitlabServer, conn: Connection) -> None:
    project = server.project(PATH)
    item = server.add(
        PATH,
        "merge_requests",
        "Add cache",
        "Adds a cache.",
        notes=["LGTM"],
        system_notes=["changed the description"],
    )
    node = connector.SOURCE.fetch(conn, NodeRef("GitlabMergeRequest", f"{project.id}!{item.iid}"))
    assert node is not None
    assert node.title == "!1 Add cache"
    assert node.text == "Adds a cache.\n\nreviewer: LGTM"
    assert node.url == f"https://gitlab.example.com/{PATH}/-/merge_requests/1"
    assert connector.SOURCE.fetch(conn, NodeRef("GitlabIssue", f"{project.id}#1")) is None
    assert connector.SOURCE.fetch(conn, NodeRef("GitlabIssue", "999#1")) is None


def test_bad_credentials_are_unrecoverable(server: GitlabServer, conn: Connection) -> None:
    with pytest.raises(Unrecoverable, match="401"):
        connector.SOURCE.list_roots(replace(conn, credentials={"token": "wrong"}))
    with pytest.raises(Unrecoverable, match="no token"):
        connector.SOURCE.list_roots(replace(conn, credentials={}))


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [case[1:] for case in TRANSIENT_FAILURES],
    ids=[case[0] for case in TRANSIENT_FAILURES],
)
def test_transient_failures(
    server: GitlabServer,
    conn: Connection,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    if kind == "429":
        error = Delay  # GitLab: no Retry-After, the RateLimit-Reset (or a minute) is the wait
    project = server.populate(PATH, issues=3)
    path = f"/api/v4/projects/{project.id}/issues/2/notes"
    server.fail(path, kind, **options)
    with pytest.raises(error):
        connector.SOURCE.fetch(conn, NodeRef("GitlabIssue", f"{project.id}#2"))
    assert connector.SOURCE.fetch(conn, NodeRef("GitlabIssue", f"{project.id}#2")) is not None


def test_429_delays_by_retry_after_and_blocks_the_connection(
    server: GitlabServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace)
    conn = replace(conn, rate_limits=state)
    project = server.populate(PATH, issues=1)
    server.rate_window = 90
    server.rate_limit = 1
    server._window_end = time.time() + 90
    ref = NodeRef("GitlabIssue", f"{project.id}#1")
    with pytest.raises(Delay) as caught:
        connector.SOURCE.fetch(conn, ref)  # the issue (0 left, recorded), the notes: 429
    assert 80 < caught.value.until - time.time() <= 92
    until = state.blocked_until(conn)
    assert until is not None and until.timestamp() >= caught.value.until - 1


# -- webhooks ------------------------------------------------------------------------------

NOW = datetime.now(UTC)


def test_webhook_token() -> None:
    headers, body = signed_delivery("Issue Hook", item_payload(7, "issue", 3), "tok")
    assert connector.verify(headers, body, "tok", NOW)
    assert not connector.verify(headers, body, "other", NOW)
    assert not connector.verify({}, body, "tok", NOW)
    assert not connector.verify(headers, body, "", NOW)


def test_webhook_parse() -> None:
    headers, body = signed_delivery(
        "Issue Hook", item_payload(7, "issue", 3), "t", delivery_id="u-1"
    )
    event = connector.parse(headers, body)
    assert (event.delivery_id, event.root) == ("u-1", NodeRef("GitlabProject", "7"))
    assert event.refs == [NodeRef("GitlabIssue", "7#3")]

    headers, body = signed_delivery("Merge Request Hook", item_payload(7, "merge_request", 4), "t")
    assert connector.parse(headers, body).refs == [NodeRef("GitlabMergeRequest", "7!4")]

    note = {
        "object_kind": "note",
        "project": {"id": 7},
        "object_attributes": {"noteable_type": "MergeRequest", "note": "hi"},
        "merge_request": {"iid": 9},
    }
    headers, body = signed_delivery("Note Hook", note, "t")
    assert connector.parse(headers, body).refs == [NodeRef("GitlabMergeRequest", "7!9")]

    headers, body = signed_delivery("Push Hook", {"object_kind": "push", "project": {"id": 7}}, "t")
    assert connector.parse(headers, body).refs == []
    with pytest.raises(MalformedWebhook):
        connector.parse(headers, b"{}")
    # without Idempotency-Key (a GitLab before 17.4) the body's digest is the replay key
    assert connector.parse({}, body).delivery_id.startswith("sha256:")


def test_a_missing_project_is_not_found(server: GitlabServer, conn: Connection) -> None:
    with pytest.raises(NotFound):
        connector.SOURCE.walk(conn, NodeRef("GitlabProject", "404"), None)


def test_the_replay_key_is_the_idempotency_key_and_the_event_uuid_only_the_chain() -> None:
    first = signed_delivery("Issue Hook", item_payload(7, "issue", 3), "t", chain_id="c-1")
    second = signed_delivery("Issue Hook", item_payload(7, "issue", 4), "t", chain_id="c-1")
    retry_headers = {**first[0], "X-Gitlab-Webhook-UUID": "another"}

    one, two = connector.parse(*first), connector.parse(*second)
    again = connector.parse(retry_headers, first[1])

    assert one.chain_id == two.chain_id == "c-1"
    assert one.delivery_id != two.delivery_id
    assert again.delivery_id == one.delivery_id == first[0]["Idempotency-Key"]


def test_without_an_idempotency_key_the_body_is_the_replay_key() -> None:
    headers, body = signed_delivery("Issue Hook", item_payload(7, "issue", 3), "t")
    del headers["Idempotency-Key"]
    other = json.dumps(item_payload(7, "issue", 4)).encode()

    assert connector.parse(headers, body).delivery_id == connector.parse(headers, body).delivery_id
    assert connector.parse(headers, body).delivery_id != connector.parse(headers, other).delivery_id
