"""The production registry end to end on the Google Drive and SharePoint fakes: a drive
imported and indexed by real slow-tier workers, then an edit picked up by the next import
through the provider's incremental listing (Drive's changes API, Graph's deltaLink)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.app.bootstrap import Platform
from services.connectors.nodes import NodeRef
from services.super_sources.families import import_request
from shared.db.engine import session_scope
from shared.db.models.super_sources import SuperSourceNode
from testkit.fakes.google_drive_server import MY_DRIVE, GoogleDriveServer
from testkit.fakes.sharepoint_server import SharepointServer
from tests import platform_harness as h
from tests.fixtures_platform import MakePlatform
from tests.integration.services.super_sources.conftest import make_connection, workers

TOKEN = "bench-token"
FILES = 30


def _dates(platform: Platform, org: int) -> dict[str, float]:
    with session_scope(platform.sessions) as session:
        rows = session.query(SuperSourceNode).filter_by(organization_id=org).all()
        return {row.node_id: row.synchronization_date.timestamp() for row in rows}


def _incremental(drive: GoogleDriveServer | SharepointServer, path: str) -> list[object]:
    """Calls of the incremental listing: Drive's changes.list, Graph's deltaLink (token=)."""
    calls = drive.requests_to(path)
    if isinstance(drive, SharepointServer):
        return [c for c in calls if c.param("token") is not None]
    return list(calls)


@pytest.mark.parametrize("source", ["google_drive", "sharepoint"])
def test_a_drive_is_imported_then_only_its_changes(
    make_platform: MakePlatform, organization: Callable[[], int], source: str
) -> None:
    platform = make_platform()  # the production services and registry
    org = organization()
    if source == "google_drive":
        drive = GoogleDriveServer(TOKEN)
        root, prefix = NodeRef("GoogleDrive", MY_DRIVE), f"{MY_DRIVE}/"
        incremental = "/drive/v3/changes"
    else:
        drive = SharepointServer(TOKEN)
        root, prefix = NodeRef("SharepointDrive", "b!docs"), "b!docs/"
        incremental = "/v1.0/drives/b!docs/root/delta"
    with drive:
        if isinstance(drive, GoogleDriveServer):
            files = [f.id for f in drive.populate(MY_DRIVE, files=FILES)]
        else:
            files = [f.id for f in drive.populate("site", "b!docs", files=FILES)]
        conn = make_connection(
            platform,
            org,
            source,
            credentials={"access_token": TOKEN},
            base_url=drive.base_url,
            settings={"page_size": 7},
        )
        first = platform.router.enqueue(import_request(org, source, conn, root, first_run=True))
        assert first.queue == "super_import.slow"
        with workers(platform):
            h.wait_until(lambda: len(_dates(platform, org)) == FILES, 60)
            h.wait_until(lambda: h.state(platform.broker, first.job_id) == "completed")
            listed = len(_incremental(drive, incremental))
            # When one file is edited and the root imported again (not a first run)
            before = _dates(platform, org)[prefix + files[4]]
            drive.touch(files[4], "edited")
            again = platform.router.enqueue(import_request(org, source, conn, root))
            # Then it is indexed again at its new date, through the incremental listing
            h.wait_until(lambda: _dates(platform, org)[prefix + files[4]] > before, 60)
            h.wait_until(lambda: h.state(platform.broker, again.job_id) == "completed")
        assert listed == 0 and len(_incremental(drive, incremental)) == 1
    assert sorted(_dates(platform, org)) == sorted(prefix + f for f in files)


@pytest.mark.parametrize("source", ["google_drive", "sharepoint"])
def test_a_rejected_change_token_makes_the_next_import_a_complete_walk(
    make_platform: MakePlatform, organization: Callable[[], int], source: str
) -> None:
    platform = make_platform()
    org = organization()
    drive: GoogleDriveServer | SharepointServer
    if source == "google_drive":
        drive = GoogleDriveServer(TOKEN)
        root, prefix, listing = NodeRef("GoogleDrive", MY_DRIVE), f"{MY_DRIVE}/", "/drive/v3/files"
    else:
        drive = SharepointServer(TOKEN)
        root, prefix = NodeRef("SharepointDrive", "b!docs"), "b!docs/"
        listing = "/v1.0/drives/b!docs/root/delta"
    with drive:
        if isinstance(drive, GoogleDriveServer):
            files = [f.id for f in drive.populate(MY_DRIVE, files=10)]
        else:
            files = [f.id for f in drive.populate("site", "b!docs", files=10)]
        conn = make_connection(
            platform,
            org,
            source,
            credentials={"access_token": TOKEN},
            base_url=drive.base_url,
            settings={"page_size": 4},
        )
        first = platform.router.enqueue(import_request(org, source, conn, root, first_run=True))
        with workers(platform):
            h.wait_until(lambda: h.state(platform.broker, first.job_id) == "completed", 60)
            h.wait_until(lambda: len(_dates(platform, org)) == 10, 60)
            # When a file is edited and the provider then rejects the stored token
            before = _dates(platform, org)[prefix + files[4]]
            drive.touch(files[4], "edited")
            if isinstance(drive, GoogleDriveServer):
                drive.expire_change_tokens(410)
            else:
                drive.expire_delta_tokens()
            walked = len(drive.requests_to(listing))
            again = platform.router.enqueue(import_request(org, source, conn, root))
            # Then the import completes as a complete walk and the edit is indexed
            h.wait_until(lambda: h.state(platform.broker, again.job_id) == "completed", 60)
            h.wait_until(lambda: _dates(platform, org)[prefix + files[4]] > before, 60)
        walk = drive.requests_to(listing)[walked:]
        if isinstance(drive, GoogleDriveServer):
            assert len(walk) == 3  # files.list again: 10 files, 4 a page
        else:  # the rejected deltaLink, then the Location's fresh enumeration ($top kept)
            assert [(r.param("token") is None, r.param("$top")) for r in walk] == [
                (False, None),
                (True, "200"),
            ]
        assert len(_dates(platform, org)) == 10
