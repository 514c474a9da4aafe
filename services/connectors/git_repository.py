"""Git: a repository's text files, fetched with dulwich, incremental by commit.

Each connection keeps a bare mirror per repository under ``settings.cache_dir`` (default: the
system temporary directory), fetched with dulwich's client (local path, ``file://``, smart
HTTP(S) with ``credentials.username/password``, or SSH). A file lock serialises fetches of one
mirror across worker processes; reading objects while another process fetches is safe (packs
are renamed into place).

* roots: ``settings.repositories`` (clone URLs).
* walk: fetch, pin the branch (``settings.branch``, else the remote's HEAD) in the mirror as
  ``refs/speedtier/head``, and list the text files (regular files at most
  ``settings.max_file_bytes``, default 1 MiB, without a NUL byte in their first 8 KiB) in
  path order, ``settings.page_size`` (500) a page. With ``since`` (the last indexed commit,
  which is the watermark of a complete walk) only the paths changed between it and the head
  are listed, deleted ones included (their fetch answers None). The checkpoint pins the head
  commit, so a walk's pages all describe one commit.
* fetch: the file at the pinned head; None when it is gone, too large or binary. Its
  synchronization date is the head commit's time.

Node ids: ``GitRepository`` the clone URL; ``GitFile`` ``<clone url>#<path>``.

The mirrors and everything dulwich does are in ``services.connectors.git_mirror``, imported
by the first walk or fetch.
"""

from __future__ import annotations

import json

from services.connectors.nodes import Connection, Node, NodeRef, NodeSource, WalkPage
from shared.errors import Retryable, Unrecoverable

REPOSITORY = "GitRepository"
FILE = "GitFile"
PAGE_SIZE = 500


class GitSource:
    """Text files of the connection's Git repositories."""

    source = "git"
    root_node_types: tuple[str, ...] = (REPOSITORY,)
    indexable_node_types: tuple[str, ...] = (FILE,)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        return [NodeRef(REPOSITORY, str(url)) for url in conn.settings.get("repositories") or []]

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        from services.connectors import git_mirror as git

        url = root.node_id
        pinned = _decode(checkpoint)
        with git.mirror(conn, url, fetch=pinned is None) as repo:
            if pinned is not None:
                head, since, offset = pinned
                if git.oid(head) not in repo.object_store:
                    raise Retryable(f"git {url}: commit {head} left the mirror; walk again")
            else:
                fresh, offset = git.pin_head(conn, repo, url), 0
                if fresh is None:
                    return WalkPage([], None, watermark=since)
                head = fresh
            paths = git.changed_paths(conn, repo, head, since)
            size = int(conn.settings.get("page_size") or PAGE_SIZE)
            page = paths[offset : offset + size]
            when = git.commit_time(repo, head)
        refs = [NodeRef(FILE, f"{url}#{path}") for path in page]
        dates = dict.fromkeys(refs, when)
        if offset + size < len(paths):
            state = json.dumps({"head": head, "since": since, "offset": offset + size})
            return WalkPage(refs, state, dates=dates)
        return WalkPage(refs, None, watermark=head, dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        url, _, path = ref.node_id.partition("#")
        if not url or not path:
            raise Unrecoverable(f"git: bad node id {ref.node_id!r} (<clone url>#<path>)")
        from services.connectors import git_mirror as git

        with git.mirror(conn, url, fetch=False) as repo:
            head = git.pinned_head(repo) or git.pin_head(conn, repo, url)
            if head is None:
                return None
            blob = git.blob_at(repo, head, path.encode())
            if blob is None or not git.indexable(conn, blob):
                return None
            when = git.commit_time(repo, head)
        return Node(
            ref=ref,
            title=path,
            text=blob.as_raw_string().decode("utf-8", errors="replace"),
            url=None,
            synchronization_date=when,
        )


SOURCE: NodeSource = GitSource()


def _decode(checkpoint: str | None) -> tuple[str, str | None, int] | None:
    if not checkpoint:
        return None
    try:
        raw = json.loads(checkpoint)
        return str(raw["head"]), raw.get("since"), int(raw["offset"])
    except (ValueError, KeyError, TypeError):
        return None
