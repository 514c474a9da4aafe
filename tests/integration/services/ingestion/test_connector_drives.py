"""Google Drive and SharePoint bound to knowledge bases, through their protocol fakes
(``testkit/fakes``, each driven by the provider's SDK in ``tests/.../connectors``) on real
PostgreSQL and Redis: a full pass (files.list pages, Graph delta pages), an incremental
pass (Drive's changes API, Graph's deltaLink) that fetches only what changed and removes
what was deleted, Docs exported as text or HTML, and the failures: 401, a rate limit
(403 userRateLimitExceeded / 429 with Retry-After), a truncated page, a per-item 404."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.app.bootstrap import Platform
from shared.errors import Delay, Retryable, Unrecoverable
from testkit.fakes.google_drive_server import FOLDER, MY_DRIVE, GoogleDriveServer
from testkit.fakes.sharepoint_server import SharepointServer
from tests.fixtures_platform import MakePlatform
from tests.integration.services.ingestion.connector_factories import KEY, Bound, bind
from tiers.options import CHECKPOINT

TOKEN = "drive-token"
FILES = "/drive/v3/files"


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(connector_credentials_key=KEY)


@pytest.fixture
def drive() -> Iterator[GoogleDriveServer]:
    server = GoogleDriveServer(TOKEN)
    with server:
        yield server


@pytest.fixture
def graph() -> Iterator[SharepointServer]:
    server = SharepointServer(TOKEN)
    with server:
        yield server


def drive_bound(platform: Platform, drive: GoogleDriveServer, **settings: object) -> Bound:
    return bind(
        platform,
        "google_drive",
        drive.base_url,
        {"access_token": TOKEN},
        settings={"page_size": 10, **settings},
    )


def test_drive_full_then_incremental(platform: Platform, drive: GoogleDriveServer) -> None:
    # Given 25 Google Docs in My Drive
    files = drive.populate(MY_DRIVE, files=25)
    bound = drive_bound(platform, drive)
    # When the binding syncs: three files.list pages, every Doc exported as text
    first = bound.sync()
    assert (first.finished, first.landed, first.pages) == (True, 25, 3)
    documents = bound.documents()
    doc = documents["Doc 7"]
    assert doc.source_bytes == b"# Doc 7\n\nBody of doc 7 in my-drive."
    assert (doc.content_type, doc.connector) == ("text/plain; charset=utf-8", "google_drive")
    assert doc.url == f"https://docs.google.com/document/d/{files[7].id}/edit"
    bound.ingest_all()
    assert {d.status for d in bound.documents().values()} == {"ready"}
    assert bound.binding().watermark
    listed = len(drive.requests_to(FILES))
    # Given two edits, a deletion and a new file
    drive.touch(files[3].id, "Doc 3, rewritten.")
    drive.touch(files[4].id, "Doc 4, rewritten.")
    drive.remove(files[5].id)
    drive.add(MY_DRIVE, "Doc new", "A brand new doc.")
    # When it syncs again: the changes API only, no listing of every file
    second = bound.sync()
    assert len(drive.requests_to(FILES)) == listed
    assert drive.requests_to("/drive/v3/changes")
    assert (second.landed, second.removed) == (3, 1)
    documents = bound.documents()
    assert "Doc 5" not in documents and "Doc new" in documents
    assert documents["Doc 3"].source_bytes == b"# Doc 3\n\nDoc 3, rewritten."
    assert documents["Doc 3"].status == "processing" and documents["Doc 2"].status == "ready"


def test_drive_docs_exported_as_html(platform: Platform, drive: GoogleDriveServer) -> None:
    drive.add(MY_DRIVE, "Handbook", "Holidays are in August.")
    bound = drive_bound(platform, drive, export_format="html")
    bound.sync()
    document = bound.documents()["Handbook"]
    assert document.content_type == "text/html; charset=utf-8"
    assert b"<p>Holidays are in August.</p>" in (document.source_bytes or b"")
    exports = drive.requests_to(f"{FILES}/{next(iter(drive.files))}/export")
    assert [r.param("mimeType") for r in exports] == ["text/html"]
    bound.ingest_all()
    assert bound.documents()["Handbook"].status == "ready"


def test_a_full_drive_pass_removes_what_the_listing_no_longer_has(
    platform: Platform, drive: GoogleDriveServer
) -> None:
    files = drive.populate(MY_DRIVE, files=12)
    bound = drive_bound(platform, drive)
    bound.sync()
    # A file trashed: a full pass (asked for) does not list it and removes it
    drive.files[files[0].id].trashed = True
    outcome = bound.sync(full=True)
    assert outcome.removed == 1 and "Doc 0" not in bound.documents()


@pytest.mark.parametrize("status", [400, 404, 410])
def test_a_rejected_change_token_starts_a_full_pass_that_removes_only_what_is_gone(
    platform: Platform, drive: GoogleDriveServer, status: int
) -> None:
    # Given a synced drive of 12 Docs
    files = drive.populate(MY_DRIVE, files=12)
    bound = drive_bound(platform, drive)
    bound.sync()
    token = bound.binding().watermark
    # And then an edit, a file trashed without a change the old token could show, and Drive
    # rejecting every page token issued so far
    drive.touch(files[3].id, "Doc 3, rewritten.")
    drive.files[files[0].id].trashed = True
    drive.expire_change_tokens(status)
    listed = len(drive.requests_to(FILES))
    # When the binding syncs: the rejected token is dropped and every file listed again
    outcome = bound.sync()
    assert outcome.finished and (outcome.landed, outcome.removed) == (1, 1)
    assert len(drive.requests_to(FILES)) > listed
    documents = bound.documents()
    assert len(documents) == 11 and "Doc 0" not in documents
    assert documents["Doc 3"].source_bytes == b"# Doc 3\n\nDoc 3, rewritten."
    assert bound.binding().watermark not in (None, token)
    # Then the next sync is incremental again, from the new token
    drive.touch(files[5].id, "Doc 5, rewritten.")
    listed = len(drive.requests_to(FILES))
    assert bound.sync().landed == 1 and len(drive.requests_to(FILES)) == listed


def test_drive_bad_credentials_fail_the_binding(
    platform: Platform, drive: GoogleDriveServer
) -> None:
    drive.populate(MY_DRIVE, files=2)
    bound = bind(platform, "google_drive", drive.base_url, {"access_token": "expired"})
    with pytest.raises(Unrecoverable):
        bound.sync(final_attempt=False)
    binding = bound.binding()
    assert binding.sync_failures == 1 and "HTTP 401" in binding.last_error
    assert "expired" not in binding.last_error
    assert bound.documents() == {}


def test_drive_rate_limit_delays_and_resumes_without_refetching(
    platform: Platform, drive: GoogleDriveServer
) -> None:
    drive.populate(MY_DRIVE, files=8)
    bound = drive_bound(platform, drive, page_size=100)
    # Given a Drive that answers 403 userRateLimitExceeded after 7 calls a minute
    drive.rate_limit, drive.rate_window = 7, 60.0
    with pytest.raises(Delay) as raised:
        bound.sync()
    # Then the files landed before the limit are kept and the delay carries that progress
    landed = set(bound.documents())
    assert 0 < len(landed) < 8
    assert raised.value.carry[CHECKPOINT].endswith(f":{len(landed)}")
    # And the connection is blocked in Redis until the wait is over: the next delivery
    # is paced without calling Drive
    calls = len(drive.requests)
    with pytest.raises(Delay) as paced:
        bound.sync()
    assert paced.value.source == "pacing" and len(drive.requests) == calls
    # When the window reopens, the rest lands and nothing landed is exported again
    drive.rate_limit = None
    state = bound.ctx.rate_limits
    assert state is not None
    platform.broker.client.delete(*platform.broker.client.keys(f"{state.namespace}:*"))
    before = len(drive.requests)
    assert bound.sync().finished
    assert len(bound.documents()) == 8
    again = {r.path.split("/")[4] for r in drive.requests[before:] if r.path.endswith("/export")}
    landed_ids = {f.id for f in drive.files.values() if f.name in landed}
    assert len(again) == 8 - len(landed) and not again & landed_ids


def test_a_truncated_drive_page_removes_nothing(
    platform: Platform, drive: GoogleDriveServer
) -> None:
    files = drive.populate(MY_DRIVE, files=15)
    bound = drive_bound(platform, drive)
    bound.sync()
    drive.remove(files[14].id)
    drive.fail(FILES, "truncated", after=1)  # the second page of the next listing
    with pytest.raises(Retryable):
        bound.sync(full=True)
    assert "Doc 14" in bound.documents()
    outcome = bound.sync(full=True)  # the retry resumes after the first page
    assert outcome.removed == 1 and outcome.pages == 1


def sharepoint_bound(platform: Platform, graph: SharepointServer, **settings: object) -> Bound:
    return bind(
        platform,
        "sharepoint",
        graph.base_url,
        {"access_token": TOKEN},
        settings={"site_id": "contoso,1,2", "page_size": 5, **settings},
    )


def test_sharepoint_delta_full_then_incremental(
    platform: Platform, graph: SharepointServer
) -> None:
    # Given two document libraries of a site, one with 12 files, one with 3
    items = graph.populate("contoso,1,2", "b!lib1", files=12)
    graph.populate("contoso,1,2", "b!lib2", files=3)
    bound = sharepoint_bound(platform, graph)
    first = bound.sync()
    # Then both libraries are walked (delta pages of 5, @odata.nextLink) and every file lands
    assert (first.finished, first.landed) == (True, 15)
    assert len(graph.requests_to("/v1.0/sites/contoso,1,2/drives")) == 1
    documents = bound.documents()
    assert documents["note-4.txt"].source_bytes == b"# note-4.txt\n\nNote 4 of b!lib1."
    assert "note-1.txt (b!lib2/" in " ".join(documents)  # same name in the other library
    bound.ingest_all()
    # When a file changes and another is deleted, the deltaLink lists only those
    graph.touch(items[2].id, "Note two, edited.")
    graph.remove(items[6].id)
    fetched = len([r for r in graph.requests if "/items/" in r.path])
    second = bound.sync()
    assert (second.landed, second.removed, second.listed) == (1, 1, 2)
    assert len([r for r in graph.requests if "/items/" in r.path]) - fetched == 3
    assert "note-6.txt" not in bound.documents()


def test_graph_resync_required_follows_location_into_a_full_pass(
    platform: Platform, graph: SharepointServer
) -> None:
    # Given a synced library of 12 files
    items = graph.populate("contoso,1,2", "b!lib1", files=12)
    bound = sharepoint_bound(platform, graph)
    bound.sync()
    # And then an edit, a deletion, and Graph answering the stored deltaLink 410 resyncRequired
    graph.touch(items[2].id, "Note two, edited.")
    graph.remove(items[6].id)
    graph.expire_delta_tokens()
    # When the binding syncs: the fresh enumeration Location names is walked, as a full pass
    before = len(graph.requests_to("/v1.0/drives/b!lib1/root/delta"))
    outcome = bound.sync()
    rejected, fresh = graph.requests_to("/v1.0/drives/b!lib1/root/delta")[before : before + 2]
    assert outcome.finished and (outcome.landed, outcome.removed) == (1, 1)
    assert rejected.param("token") and not fresh.param("token")
    # (the Location keeps the rejected request's $top, 200; a walk of its own would ask 5)
    assert fresh.param("$top") == "200"
    documents = bound.documents()
    assert len(documents) == 11 and "note-6.txt" not in documents
    # Then the next sync is incremental again
    graph.touch(items[3].id, "Note three, edited.")
    assert bound.sync().landed == 1


def test_sharepoint_throttling_is_a_delay(platform: Platform, graph: SharepointServer) -> None:
    graph.populate("contoso,1,2", "b!lib", files=4)
    bound = sharepoint_bound(platform, graph, drive_id="b!lib", site_id=None)
    graph.fail("/v1.0/drives/b!lib/root/delta", "429", retry_after=7)
    with pytest.raises(Delay) as raised:
        bound.sync()
    assert raised.value.source == "provider"
    assert 5 <= raised.value.until - __import__("time").time() <= 8
    assert bound.documents() == {}


def test_a_sharepoint_item_binding_refreshes_one_document(
    platform: Platform, graph: SharepointServer
) -> None:
    items = graph.populate("contoso,1,2", "b!lib", files=2)
    ident = f"b!lib/{items[1].id}"
    bound = bind(
        platform,
        "sharepoint",
        graph.base_url,
        {"access_token": TOKEN},
        item_id=ident,
        schedule="daily",
    )
    assert bound.sync().landed == 1
    assert list(bound.documents()) == ["note-1.txt"]
    graph.touch(items[1].id, "Changed note.")
    assert bound.sync(scheduled=True).landed == 1
    assert bound.documents()["note-1.txt"].submission_cause == "refresh"
    graph.remove(items[1].id)  # 404 on the item: proven gone
    assert bound.sync(scheduled=True).removed == 1
    assert bound.documents() == {}


def test_rate_limits_are_per_user(platform: Platform) -> None:
    # Given one Drive serving two organizations' users, 4 calls a minute each
    server = GoogleDriveServer("user-a", tokens=("user-b",), rate_limit=4, rate_window=60.0)
    with server:
        server.populate("0Ashared", files=6)
        a = bind(
            platform,
            "google_drive",
            server.base_url,
            {"access_token": "user-a"},
            settings={"drive_id": "0Ashared"},
        )
        b = bind(
            platform,
            "google_drive",
            server.base_url,
            {"access_token": "user-b"},
            settings={"drive_id": "0Ashared"},
        )
        # When the first user's sync spends its quota
        with pytest.raises(Delay):
            a.sync()
        # Then the second user's calls still go through until its own quota is spent
        with pytest.raises(Delay):
            b.sync()
        assert b.documents() and a.documents()
        callers = {r.headers.get("authorization") for r in server.requests}
        assert callers == {"Bearer user-a", "Bearer user-b"}


def test_a_drive_folder_binding_syncs_its_subtree_only(
    platform: Platform, drive: GoogleDriveServer
) -> None:
    # Given a folder with a subfolder, in a shared drive with other files
    top = drive.add("0Ateam", "Handbook", "", mime_type=FOLDER)
    sub = drive.add("0Ateam", "Policies", "", mime_type=FOLDER, parent=top.id)
    drive.add("0Ateam", "Welcome", "Hello.", parent=top.id)
    drive.add("0Ateam", "Leave", "Twenty days.", parent=sub.id)
    outside = drive.add("0Ateam", "Budget", "Secret numbers.")
    bound = drive_bound(platform, drive, drive_id="0Ateam", folder_id=top.id)
    # When it syncs, only the subtree's files land
    assert bound.sync().landed == 2
    assert set(bound.documents()) == {"Welcome", "Leave"}
    # And the next pass takes the subtree's changes only
    drive.add("0Ateam", "Travel", "Book early.", parent=sub.id)
    drive.touch(outside.id, "More secret numbers.")
    second = bound.sync()
    assert (second.listed, second.landed) == (1, 1)
    assert set(bound.documents()) == {"Welcome", "Leave", "Travel"}
