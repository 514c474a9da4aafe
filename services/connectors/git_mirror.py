"""The bare mirrors behind the Git connector (``services.connectors.git_repository``), read and
fetched with dulwich.

A module of its own so that dulwich (3.7 MiB) is imported by the first walk or fetch of a
Git source, not by every process that registers the connectors.
"""

from __future__ import annotations

import fcntl
import hashlib
import ipaddress
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dulwich.client import HTTPUnauthorized, get_transport_and_path
from dulwich.diff_tree import tree_changes
from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
from dulwich.object_store import tree_lookup_path
from dulwich.objects import Blob, Commit, ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from services.connectors.nodes import Connection
from shared.egress.addresses import AddressRefused, default_guard
from shared.egress.session import guarded_pool_manager
from shared.errors import Retryable, Unrecoverable
from shared.http import NotFound

HEAD_REF = Ref(b"refs/speedtier/head")
FETCHED_REF = Ref(b"refs/speedtier/fetched")
MAX_FILE_BYTES = 1024 * 1024
SNIFF_BYTES = 8192
USER_AGENT = "git/speedtier"


@contextmanager
def mirror(conn: Connection, url: str, *, fetch: bool) -> Iterator[Repo]:
    """The connection's bare mirror of ``url`` (created if missing), fetched first when
    ``fetch``; the lock is held while fetching only."""
    base = Path(
        str(conn.settings.get("cache_dir") or Path(tempfile.gettempdir()) / "speedtier-git")
    )
    name = f"{conn.connection_id}-{hashlib.sha256(url.encode()).hexdigest()[:20]}.git"
    path = base / name
    base.mkdir(parents=True, exist_ok=True)
    with _locked(base / f"{name}.lock"):
        if not (path / "HEAD").exists():
            Repo.init_bare(str(path), mkdir=not path.exists()).close()
            fetch = True
        repo = Repo(str(path))
        try:
            if fetch:
                _fetch(conn, repo, url)
        except BaseException:
            repo.close()
            raise
    try:
        yield repo
    finally:
        repo.close()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_host(url: str) -> None:
    """The address check of a network remote, before dulwich reads the URL. ``git://`` and
    SSH transports open their own socket, so this is their only check; HTTP remotes are
    checked again when the guarded pool connects."""
    if "://" in url:
        parts = urlsplit(url)
        ports = {"http": 80, "https": 443, "git": 9418}
        host, port = parts.hostname or "", parts.port or ports.get(parts.scheme, 22)
    else:  # scp-like user@host:path
        host, port = url.split("@", 1)[1].split(":", 1)[0], 22
    default_guard().resolve(host, port, url)


def _check_local(url: str) -> None:
    """A local path or ``file://`` remote reads the worker's own disk: the same trust as its
    loopback address, so it is refused unless the egress guard allows loopback (a tenant's
    setting must not read another tenant's mirror or any repository on the host)."""
    if not default_guard().permits(ipaddress.ip_address("127.0.0.1")):
        raise AddressRefused(url, "localhost", "127.0.0.1", "a local repository")


def _fetch(conn: Connection, repo: Repo, url: str) -> None:
    """Fetch every branch of ``url`` into ``repo``; pin the wanted branch's head."""
    options: dict[str, Any] = {}
    if conn.credentials.get("username"):
        options = {
            "username": conn.credentials["username"],
            "password": conn.credentials.get("password"),
        }
    if url.startswith(("http://", "https://", "git://", "ssh://")) or "@" in url.split("/")[0]:
        _check_host(url)
    else:
        _check_local(url)
    if url.startswith(("http://", "https://")):
        options["pool_manager"] = guarded_pool_manager(headers={"User-Agent": USER_AGENT})
    try:
        client, remote = get_transport_and_path(url, **options)
        result = client.fetch(remote, repo)
    except HTTPUnauthorized as exc:
        raise Unrecoverable(f"git {url}: HTTP 401 (invalid credentials)") from exc
    except NotGitRepository as exc:
        raise NotFound(f"git {url}: not a repository") from exc
    except (HangupException, GitProtocolError, OSError) as exc:
        if "not found" in str(exc).lower() or "404" in str(exc):
            raise NotFound(f"git {url}: {exc}") from exc
        raise Retryable(f"git {url}: {type(exc).__name__}: {exc}") from exc
    branch = str(conn.settings.get("branch") or "")
    default = result.symrefs.get(Ref(b"HEAD"), Ref(b"refs/heads/main"))
    wanted = Ref(b"refs/heads/" + branch.encode()) if branch else default
    sha = result.refs.get(wanted)
    if sha is None:
        if branch:
            raise Unrecoverable(f"git {url}: no branch {branch!r}")
        return  # an empty repository
    repo.refs[FETCHED_REF] = sha


def pin_head(conn: Connection, repo: Repo, url: str) -> str | None:
    """Pin the fetched head for the walk and the fetches that follow it."""
    if FETCHED_REF not in repo.refs:
        _fetch(conn, repo, url)
    if FETCHED_REF not in repo.refs:
        return None
    fetched = repo.refs[FETCHED_REF]
    repo.refs[HEAD_REF] = fetched
    return fetched.decode()


def changed_paths(conn: Connection, repo: Repo, head: str, since: str | None) -> list[str]:
    head_tree = _tree(repo, head)
    store = repo.object_store
    if since and oid(since) in store and isinstance(repo[oid(since)], Commit):
        if since == head:
            return []
        paths: set[str] = set()
        for change in tree_changes(store, _tree(repo, since), head_tree):
            for side in (change.old, change.new):
                if side is not None and side.path is not None:
                    paths.add(side.path.decode("utf-8", errors="replace"))
        return sorted(p for p in paths if _listed(conn, repo, head_tree, p))
    listed = []
    for entry in store.iter_tree_contents(head_tree):
        if entry.path is None or entry.mode is None or entry.sha is None:
            continue
        if stat.S_ISREG(entry.mode):
            blob = repo[entry.sha]
            if isinstance(blob, Blob) and indexable(conn, blob):
                listed.append(entry.path.decode("utf-8", errors="replace"))
    return sorted(listed)


def _listed(conn: Connection, repo: Repo, head_tree: ObjectID, path: str) -> bool:
    """A changed path is listed when it is gone (the index drops it) or indexable now."""
    try:
        mode, sha = tree_lookup_path(repo.__getitem__, head_tree, path.encode())
    except KeyError:
        return True
    blob = repo[sha]
    return stat.S_ISREG(mode) and isinstance(blob, Blob) and indexable(conn, blob)


def oid(sha: str) -> ObjectID:
    return ObjectID(sha.encode())


def _tree(repo: Repo, commit: str) -> ObjectID:
    made = repo[oid(commit)]
    if not isinstance(made, Commit):
        raise Unrecoverable(f"git: {commit} is not a commit")
    return ObjectID(made.tree)


def blob_at(repo: Repo, head: str, path: bytes) -> Blob | None:
    try:
        mode, sha = tree_lookup_path(repo.__getitem__, _tree(repo, head), path)
    except KeyError:
        return None
    blob = repo[sha]
    return blob if stat.S_ISREG(mode) and isinstance(blob, Blob) else None


def indexable(conn: Connection, blob: Blob) -> bool:
    limit = int(conn.settings.get("max_file_bytes") or MAX_FILE_BYTES)
    data = blob.as_raw_string()
    return len(data) <= limit and b"\x00" not in data[:SNIFF_BYTES]


def commit_time(repo: Repo, sha: str) -> datetime:
    made = repo[oid(sha)]
    assert isinstance(made, Commit)
    return datetime.fromtimestamp(made.commit_time, UTC)


def pinned_head(repo: Repo) -> str | None:
    """The head commit pinned for the walk (None when nothing is pinned)."""
    return repo.refs[HEAD_REF].decode() if HEAD_REF in repo.refs else None
