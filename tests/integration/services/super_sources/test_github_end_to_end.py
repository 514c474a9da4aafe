"""The production registry end to end on the GitHub fake: a repository imported and indexed
by real workers, then an edit delivered by a signed webhook indexed again."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from services.app.bootstrap import Platform
from services.connectors.nodes import NodeRef
from services.super_sources.families import import_request
from shared.db.engine import session_scope
from shared.db.models.super_sources import SuperSourceNode
from testkit.fakes.github_server import GithubServer, issue_payload, signed_delivery
from tests import platform_harness as h
from tests.fixtures_platform import MakePlatform
from tests.integration.services.super_sources.conftest import make_connection, workers

TOKEN, SECRET, REPO = "gh-test-token", "hook-secret", "octo/hello"


@pytest.fixture
def github() -> Iterator[GithubServer]:
    fake = GithubServer(TOKEN, max_per_page=10)
    with fake:
        yield fake


def _dates(platform: Platform, org: int) -> dict[str, float]:
    with session_scope(platform.sessions) as session:
        rows = session.query(SuperSourceNode).filter_by(organization_id=org).all()
        return {row.node_id: row.synchronization_date.timestamp() for row in rows}


def test_a_github_repository_is_imported_and_a_webhook_edit_indexed_again(
    make_platform: MakePlatform, github: GithubServer, organization: Callable[[], int]
) -> None:
    from services.app.api import create_app

    platform = make_platform()  # the production services and registry
    github.populate(REPO, issues=18, pulls=7)
    org = organization()
    conn = make_connection(
        platform,
        org,
        "github",
        credentials={"token": TOKEN},
        base_url=github.base_url,
        webhook_secret=SECRET,
    )
    answer = platform.router.enqueue(
        import_request(org, "github", conn, NodeRef("GithubRepo", REPO), first_run=True)
    )
    assert answer.queue == "super_import.fast"
    with workers(platform):
        h.wait_until(lambda: len(_dates(platform, org)) == 25, 60)
        h.wait_until(lambda: h.state(platform.broker, answer.job_id) == "completed")
        # When an issue is edited and GitHub delivers the event
        edited = github.touch(REPO, 3, body="a brand new body")
        headers, body = signed_delivery("issues", issue_payload(REPO, 3), SECRET)
        response = (
            create_app(platform)
            .test_client()
            .post(f"/webhooks/github/events?connection={conn}", data=body, headers=headers)
        )
        assert response.status_code == 202
        # Then the issue is indexed again at its new date
        h.wait_until(lambda: _dates(platform, org)[f"{REPO}#3"] >= int(edited.updated_at), 30)
    assert sorted(_dates(platform, org)) == sorted(f"{REPO}#{n}" for n in range(1, 26))
