"""Google Drive: the fake driven by google-api-python-client, then the connector against the
fake (complete walk, changes walk, export, failures)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from google.oauth2.credentials import Credentials
from googleapiclient.discovery import build
from googleapiclient.errors import HttpError

from services.connectors import google_drive as connector
from services.connectors.nodes import Connection, NodeRef, RateLimitState
from shared.errors import Delay, JobError, Unrecoverable
from testkit.fakes.google_drive_server import FOLDER, MY_DRIVE, GoogleDriveServer
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

TOKEN = "ya29.fake"
ROOT = NodeRef("GoogleDrive", MY_DRIVE)


@pytest.fixture
def server() -> Iterator[GoogleDriveServer]:
    fake = GoogleDriveServer(TOKEN)
    with fake:
        yield fake


@pytest.fixture
def conn(server: GoogleDriveServer) -> Connection:
    return Connection(
        source="google_drive",
        connection_id=41,
        organization_id=4,
        base_url=server.base_url,
        credentials={"access_token": TOKEN},
        settings={"page_size": 100},
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


# -- the fake, as google-api-python-client sees it ------------------------------------------


def test_the_sdk_lists_exports_and_follows_changes(server: GoogleDriveServer) -> None:
    files = server.populate(MY_DRIVE, files=250)
    service = build(
        "drive",
        "v3",
        credentials=Credentials(token=TOKEN),
        static_discovery=True,
        client_options={"api_endpoint": f"{server.base_url}/drive/v3/"},
    )
    seen: list[str] = []
    request = service.files().list(
        q="trashed = false", pageSize=100, fields="nextPageToken,files(id,name,modifiedTime)"
    )
    while request is not None:
        answer = request.execute()
        seen += [f["id"] for f in answer["files"]]
        request = service.files().list_next(request, answer)
    assert seen == [f.id for f in files]
    exported = service.files().export(fileId=files[3].id, mimeType="text/plain").execute()
    assert exported == b"Body of doc 3 in my-drive."
    html = service.files().export(fileId=files[3].id, mimeType="text/html").execute()
    assert b"<p>Body of doc 3" in html

    start = service.changes().getStartPageToken().execute()["startPageToken"]
    server.touch(files[7].id, "edited")
    server.remove(files[8].id)
    changes = service.changes().list(pageToken=start).execute()
    assert [(c["fileId"], c["removed"]) for c in changes["changes"]] == [
        (files[7].id, False),
        (files[8].id, True),
    ]
    assert "newStartPageToken" in changes and "nextPageToken" not in changes

    with pytest.raises(HttpError) as missing:
        service.files().get(fileId="nope").execute()
    assert missing.value.resp.status == 404
    wrong_key = build(
        "drive",
        "v3",
        developerKey="wrong",
        static_discovery=True,
        client_options={"api_endpoint": f"{server.base_url}/drive/v3/"},
    )
    with pytest.raises(HttpError) as refused:
        wrong_key.files().list().execute()
    assert refused.value.resp.status == 401


def test_the_sdk_lists_a_folder_and_reads_parents(server: GoogleDriveServer) -> None:
    # Given a folder with a file and a subfolder, and a file at the top of My Drive
    folder = server.add(MY_DRIVE, "Handbook", "", mime_type=FOLDER)
    inside = server.add(MY_DRIVE, "Holidays", "August.", parent=folder.id)
    sub = server.add(MY_DRIVE, "Policies", "", mime_type=FOLDER, parent=folder.id)
    server.add(MY_DRIVE, "Elsewhere", "Not in the handbook.")
    service = build(
        "drive",
        "v3",
        credentials=Credentials(token=TOKEN),
        static_discovery=True,
        client_options={"api_endpoint": f"{server.base_url}/drive/v3/"},
    )
    # When the SDK lists the folder's children, as Drive's search guide writes the query
    answer = (
        service.files()
        .list(
            q=f"'{folder.id}' in parents and trashed = false",
            fields="nextPageToken,files(id,name,mimeType,parents)",
        )
        .execute()
    )
    # Then only its children come back, each naming its parent
    assert [(f["id"], f["parents"]) for f in answer["files"]] == [
        (inside.id, [folder.id]),
        (sub.id, [folder.id]),
    ]
    top = service.files().list(q="'root' in parents", fields="files(id)").execute()
    assert folder.id in [f["id"] for f in top["files"]] and inside.id not in str(top)
    got = service.files().get(fileId=inside.id, fields="id,parents").execute()
    assert got["parents"] == [folder.id]


# -- the connector ------------------------------------------------------------------------


def test_list_roots_includes_shared_drives(server: GoogleDriveServer, conn: Connection) -> None:
    server.populate("0AShared", files=1)
    assert connector.SOURCE.list_roots(conn) == [ROOT, NodeRef("GoogleDrive", "0AShared")]


def test_complete_walk_then_changes_only(server: GoogleDriveServer, conn: Connection) -> None:
    files = server.populate(MY_DRIVE, files=230)
    server.add(MY_DRIVE, "folder", "", mime_type="application/vnd.google-apps.folder")
    server.populate("0AOther", files=5)
    refs, watermark = walk_all(conn, ROOT)
    assert [r.node_id for r in refs] == [f"{MY_DRIVE}/{f.id}" for f in files]  # 3 pages
    assert watermark is not None

    server.touch(files[10].id, "new text")
    server.remove(files[11].id)
    changed, again = walk_all(conn, ROOT, since=watermark)
    assert [r.node_id for r in changed] == [
        f"{MY_DRIVE}/{files[10].id}",
        f"{MY_DRIVE}/{files[11].id}",
    ]
    assert connector.SOURCE.fetch(conn, changed[1]) is None  # removed: gone
    node = connector.SOURCE.fetch(conn, changed[0])
    assert node is not None and node.text == "new text"
    assert walk_all(conn, ROOT, since=again)[0] == []


def test_an_edit_during_a_complete_walk_is_in_the_next_changes_walk(
    server: GoogleDriveServer, conn: Connection
) -> None:
    files = server.populate(MY_DRIVE, files=150)
    first = connector.SOURCE.walk(conn, ROOT, None)
    server.touch(files[0].id, "edited mid-walk")  # on the page already read
    rest = connector.SOURCE.walk(conn, ROOT, first.checkpoint)
    assert rest.checkpoint is None
    changed, _ = walk_all(conn, ROOT, since=rest.watermark)
    assert [r.node_id for r in changed] == [f"{MY_DRIVE}/{files[0].id}"]


def test_fetch_exports_docs_as_text_or_html_and_reads_text_files(
    server: GoogleDriveServer, conn: Connection
) -> None:
    doc = server.add(MY_DRIVE, "Plan", "The plan.")
    note = server.add(MY_DRIVE, "notes.md", "# Notes", mime_type="text/markdown")
    pdf = server.add(MY_DRIVE, "scan.pdf", "%PDF", mime_type="application/pdf")
    node = connector.SOURCE.fetch(conn, NodeRef("GoogleDriveFile", f"{MY_DRIVE}/{doc.id}"))
    assert node is not None and (node.title, node.text) == ("Plan", "The plan.")
    assert node.synchronization_date.timestamp() == doc.modified
    html = connector.SOURCE.fetch(
        replace(conn, settings={"export_format": "html"}),
        NodeRef("GoogleDriveFile", f"{MY_DRIVE}/{doc.id}"),
    )
    assert html is not None and "<p>The plan.</p>" in html.text
    text = connector.SOURCE.fetch(conn, NodeRef("GoogleDriveFile", f"{MY_DRIVE}/{note.id}"))
    assert text is not None and text.text == "# Notes"
    binary = connector.SOURCE.fetch(conn, NodeRef("GoogleDriveFile", f"{MY_DRIVE}/{pdf.id}"))
    assert binary is not None and binary.text == "scan.pdf"
    assert connector.SOURCE.fetch(conn, NodeRef("GoogleDriveFile", f"{MY_DRIVE}/nope")) is None


def test_bad_credentials_are_unrecoverable(server: GoogleDriveServer, conn: Connection) -> None:
    with pytest.raises(Unrecoverable, match="401"):
        connector.SOURCE.walk(replace(conn, credentials={"access_token": "wrong"}), ROOT, None)
    with pytest.raises(Unrecoverable, match="no access_token"):
        connector.SOURCE.walk(replace(conn, credentials={}), ROOT, None)


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [case[1:] for case in TRANSIENT_FAILURES],
    ids=[case[0] for case in TRANSIENT_FAILURES],
)
def test_transient_failures(
    server: GoogleDriveServer,
    conn: Connection,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    server.populate(MY_DRIVE, files=3)
    server.fail("/drive/v3/files", kind, **options)
    with pytest.raises(error):
        connector.SOURCE.walk(conn, ROOT, None)
    assert len(connector.SOURCE.walk(conn, ROOT, None).refs) == 3


def test_user_rate_limit_delays_and_blocks_the_connection(
    server: GoogleDriveServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace)
    conn = replace(conn, rate_limits=state)
    server.populate(MY_DRIVE, files=3)
    server.rate_limit, server.rate_window = 1, 60  # the start token passes, files.list: 403
    with pytest.raises(Delay) as caught:
        connector.SOURCE.walk(conn, ROOT, None)
    assert connector.DEFAULT_WAIT - 5 < caught.value.until - time.time() <= connector.DEFAULT_WAIT
    until = state.blocked_until(conn)
    assert until is not None and until.timestamp() >= caught.value.until - 1


@pytest.mark.parametrize("reason", ["userRateLimitExceeded", "rateLimitExceeded"])
def test_a_repeated_403_rate_limit_backs_off_exponentially_within_the_bound(
    server: GoogleDriveServer,
    conn: Connection,
    redis_client: redis.Redis,
    namespace: str,
    reason: str,
) -> None:
    # Drive: "use a truncated exponential backoff" (guides/limits)
    state = RateLimitState(redis_client, namespace, backoff_max_seconds=100)
    conn = replace(conn, rate_limits=state)
    server.populate(MY_DRIVE, files=3)
    server.refuse(reason, path="/files", times=3)
    waits = []
    for _ in range(3):
        with pytest.raises(Delay) as caught:
            connector.SOURCE.walk(conn, ROOT, None)
        waits.append(caught.value.until - time.time())

    # 30 s, then drawn in [30, 60], then [50, 100]: growing, never over the bound
    wait = connector.DEFAULT_WAIT
    assert wait - 2 < waits[0] <= wait
    assert wait - 2 < waits[1] <= 2 * wait and 48 < waits[2] <= 100
    assert len(connector.SOURCE.walk(conn, ROOT, None).refs) == 3


def test_the_daily_limit_delays_instead_of_failing(
    server: GoogleDriveServer, conn: Connection
) -> None:
    server.populate(MY_DRIVE, files=3)
    server.refuse("dailyLimitExceeded", path="/files")

    with pytest.raises(Delay, match="dailyLimitExceeded"):
        connector.SOURCE.walk(conn, ROOT, None)


@pytest.mark.parametrize(
    "reason", ["insufficientFilePermissions", "appNotAuthorizedToFile", "cannotExportFile"]
)
def test_a_per_file_403_is_reported_as_its_reason_not_as_credentials(
    server: GoogleDriveServer, conn: Connection, reason: str
) -> None:
    file = server.populate(MY_DRIVE, files=1)[0]
    server.refuse(reason, path=f"/files/{file.id}")

    with pytest.raises(Unrecoverable) as caught:
        connector.SOURCE.fetch(conn, NodeRef(connector.FILE, f"{MY_DRIVE}/{file.id}"))

    assert f"HTTP 403 {reason}" in str(caught.value)
    assert "credentials" not in str(caught.value)


def test_a_folder_walk_lists_its_subtree_then_only_its_changes(
    server: GoogleDriveServer, conn: Connection
) -> None:
    # Given a folder tree in My Drive and files outside it
    top = server.add(MY_DRIVE, "Handbook", "", mime_type=FOLDER)
    sub = server.add(MY_DRIVE, "Policies", "", mime_type=FOLDER, parent=top.id)
    inside = [server.add(MY_DRIVE, f"Top {n}", "t", parent=top.id) for n in range(3)]
    deep = [server.add(MY_DRIVE, f"Deep {n}", "d", parent=sub.id) for n in range(2)]
    outside = server.add(MY_DRIVE, "Elsewhere", "o")
    root = NodeRef(connector.FOLDER_ROOT, f"{MY_DRIVE}/{top.id}")
    small = replace(conn, settings={"page_size": 2, "folders": [root.node_id]})
    assert connector.SOURCE.list_roots(small) == [root]
    # When it is walked, two results a page: its files and its subfolder's, not the others
    refs, watermark = walk_all(small, root)
    assert {r.node_id.split("/")[1] for r in refs} == {f.id for f in inside + deep}
    assert watermark is not None
    # Then the incremental walk lists the subtree's changes only (a new subfolder joins it)
    newer = server.add(MY_DRIVE, "Security", "", mime_type=FOLDER, parent=sub.id)
    fresh = server.add(MY_DRIVE, "Passwords", "p", parent=newer.id)
    server.touch(deep[0].id, "edited")
    server.touch(outside.id, "edited elsewhere")
    server.remove(inside[1].id)
    changed, after = walk_all(small, root, since=watermark)
    assert {r.node_id.split("/")[1] for r in changed} == {fresh.id, deep[0].id, inside[1].id}
    assert (
        connector.SOURCE.fetch(small, NodeRef(connector.FILE, f"{MY_DRIVE}/{inside[1].id}")) is None
    )
    nothing, _ = walk_all(small, root, since=after)
    assert nothing == []
