"""Git: the connector against real repositories built with dulwich, read from disk and over
smart HTTP."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from dulwich.repo import Repo

from services.connectors import git_repository as connector
from services.connectors.nodes import Connection, NodeRef
from shared.errors import Unrecoverable
from shared.http import NotFound
from testkit.fakes.git_repository import GitHttpServer, commit, init, populate


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    path = init(tmp_path / "served" / "origin.git")
    populate(path, files=500, size=200)
    commit(path, {"assets/logo.png": b"\x89PNG\r\n\x1a\n\x00\x00binary", "huge.txt": b"x" * 5000})
    return path


def connection(tmp_path: Path, **settings: object) -> Connection:
    return Connection(
        source="git",
        connection_id=41,
        organization_id=3,
        base_url="",
        credentials={},
        settings={"cache_dir": str(tmp_path / "cache"), "max_file_bytes": 4096, **settings},
    )


def walk_all(
    conn: Connection, root: NodeRef, since: str | None = None
) -> tuple[list[NodeRef], str | None, int]:
    refs: list[NodeRef] = []
    checkpoint: str | None = None
    pages = 0
    while True:
        page = connector.SOURCE.walk(conn, root, checkpoint, since)
        pages += 1
        refs += page.refs
        checkpoint = page.checkpoint
        if checkpoint is None:
            return refs, page.watermark, pages


def head_of(path: Path) -> str:
    repo = Repo(str(path))
    try:
        return repo.refs[b"refs/heads/main"].decode()
    finally:
        repo.close()


def test_walk_lists_text_files_under_the_size_limit(tmp_path: Path, origin: Path) -> None:
    conn = connection(tmp_path, page_size=200)
    root = NodeRef("GitRepository", f"file://{origin}")
    refs, watermark, pages = walk_all(conn, root)
    assert pages == 3
    assert len(refs) == len(set(refs)) == 500
    paths = {r.node_id.split("#", 1)[1] for r in refs}
    assert "docs/section7/page7.md" in paths
    assert "assets/logo.png" not in paths and "huge.txt" not in paths  # binary, too large
    assert watermark == head_of(origin)


def test_fetch_reads_the_file_at_the_pinned_head(tmp_path: Path, origin: Path) -> None:
    conn = connection(tmp_path)
    url = str(origin)  # a plain local path works too
    connector.SOURCE.walk(conn, NodeRef("GitRepository", url), None)
    node = connector.SOURCE.fetch(conn, NodeRef("GitFile", f"{url}#docs/section3/page3.md"))
    assert node is not None
    assert node.title == "docs/section3/page3.md"
    assert node.text.startswith("# Page 3\n\nLorem ipsum")
    assert node.synchronization_date.tzinfo is not None
    assert connector.SOURCE.fetch(conn, NodeRef("GitFile", f"{url}#nope.md")) is None
    assert connector.SOURCE.fetch(conn, NodeRef("GitFile", f"{url}#huge.txt")) is None
    assert connector.SOURCE.fetch(conn, NodeRef("GitFile", f"{url}#assets/logo.png")) is None
    assert connector.SOURCE.fetch(conn, NodeRef("GitFile", f"{url}#docs")) is None  # a tree


def test_incremental_by_commit(tmp_path: Path, origin: Path) -> None:
    conn = connection(tmp_path)
    url = f"file://{origin}"
    root = NodeRef("GitRepository", url)
    _, watermark, _ = walk_all(conn, root)
    commit(
        origin,
        {
            "docs/section7/page7.md": b"# Page 7, rewritten\n",
            "docs/section8/page8.md": None,
            "new/notes.txt": b"fresh",
            "new/blob.bin": b"\x00\x01",
        },
    )
    refs, watermark2, _ = walk_all(conn, root, since=watermark)
    assert sorted(r.node_id.split("#", 1)[1] for r in refs) == [
        "docs/section7/page7.md",
        "docs/section8/page8.md",
        "new/notes.txt",
    ]
    assert watermark2 == head_of(origin) != watermark
    changed = connector.SOURCE.fetch(conn, NodeRef("GitFile", f"{url}#docs/section7/page7.md"))
    assert changed is not None and changed.text == "# Page 7, rewritten\n"
    assert connector.SOURCE.fetch(conn, NodeRef("GitFile", f"{url}#docs/section8/page8.md")) is None
    assert walk_all(conn, root, since=watermark2)[0] == []


def test_a_walk_stays_on_the_commit_it_started_with(tmp_path: Path, origin: Path) -> None:
    conn = connection(tmp_path, page_size=300)
    root = NodeRef("GitRepository", f"file://{origin}")
    first = connector.SOURCE.walk(conn, root, None)
    commit(origin, {f"later/{n}.md": b"later" for n in range(50)})
    rest = connector.SOURCE.walk(conn, root, first.checkpoint)
    assert rest.checkpoint is None
    assert len(first.refs) + len(rest.refs) == 500
    assert rest.watermark != head_of(origin)  # the next walk picks the 50 up
    refs, _, _ = walk_all(conn, root, since=rest.watermark)
    assert len(refs) == 50


def test_over_smart_http_with_basic_auth(tmp_path: Path, origin: Path) -> None:
    with GitHttpServer(origin.parent, username="reader", password="s3cret") as base_url:
        url = f"{base_url}/origin.git"
        conn = connection(tmp_path)
        authed = Connection(
            **{**conn.__dict__, "credentials": {"username": "reader", "password": "s3cret"}}
        )
        refs, watermark, _ = walk_all(authed, NodeRef("GitRepository", url))
        assert len(refs) == 500 and watermark == head_of(origin)
        node = connector.SOURCE.fetch(authed, NodeRef("GitFile", f"{url}#docs/section1/page1.md"))
        assert node is not None and node.text.startswith("# Page 1")

        wrong = Connection(
            **{
                **conn.__dict__,
                "connection_id": 42,
                "credentials": {"username": "reader", "password": "no"},
            }
        )
        with pytest.raises(Unrecoverable, match="401"):
            connector.SOURCE.walk(wrong, NodeRef("GitRepository", url), None)


def test_missing_repository_is_not_found(tmp_path: Path) -> None:
    conn = connection(tmp_path)
    with pytest.raises(NotFound):
        connector.SOURCE.walk(conn, NodeRef("GitRepository", f"file://{tmp_path}/absent.git"), None)


def test_empty_repository_walks_to_nothing(tmp_path: Path) -> None:
    empty = init(tmp_path / "empty.git")
    page = connector.SOURCE.walk(connection(tmp_path), NodeRef("GitRepository", str(empty)), None)
    assert page.refs == [] and page.checkpoint is None and page.watermark is None


def test_unknown_branch_is_unrecoverable(tmp_path: Path, origin: Path) -> None:
    with pytest.raises(Unrecoverable, match="no branch"):
        connector.SOURCE.walk(
            connection(tmp_path, branch="nope"), NodeRef("GitRepository", str(origin)), None
        )


def test_list_roots(tmp_path: Path) -> None:
    conn = connection(tmp_path, repositories=["https://example.com/a.git"])
    assert connector.SOURCE.list_roots(conn) == [
        NodeRef("GitRepository", "https://example.com/a.git")
    ]


def test_fetches_and_walks_share_the_mirror_across_threads(tmp_path: Path, origin: Path) -> None:
    conn = connection(tmp_path)
    url = f"file://{origin}"
    root = NodeRef("GitRepository", url)
    refs, _, _ = walk_all(conn, root)
    errors: list[BaseException] = []
    texts: list[str] = []

    def fetch_some(offset: int) -> None:
        try:
            for ref in refs[offset::4][:40]:
                node = connector.SOURCE.fetch(conn, ref)
                assert node is not None
                texts.append(node.text)
        except BaseException as exc:  # reported below
            errors.append(exc)

    def walk_again() -> None:
        try:
            commit(origin, {"docs/extra.md": b"# Extra"})
            walk_all(conn, root)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=fetch_some, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=walk_again))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(texts) == 160 and all(t.startswith("# Page") for t in texts)


@pytest.mark.parametrize("form", ["path", "file"])
def test_a_local_repository_is_refused_where_loopback_is(
    tmp_path: Path, origin: Path, form: str
) -> None:
    # Given the production guard (no private network allowed, loopback included)
    from shared.egress.addresses import (
        AddressRefused,
        address_guard,
        default_guard,
        set_default_guard,
    )

    url = str(origin) if form == "path" else origin.as_uri()
    conn = connection(tmp_path, repositories=[url])
    before = default_guard()
    set_default_guard(address_guard(False, []))
    try:
        # When a tenant's settings name a repository on the worker's own disk
        with pytest.raises(AddressRefused) as refused:
            connector.SOURCE.walk(conn, NodeRef(connector.REPOSITORY, url), None, None)
    finally:
        set_default_guard(before)
    # Then nothing is read, and the refusal says why
    assert "local repository" in str(refused.value)
    # And where loopback is allowed (the tests' guard), the same repository is read
    refs, _, _ = walk_all(conn, NodeRef(connector.REPOSITORY, url))
    assert refs
