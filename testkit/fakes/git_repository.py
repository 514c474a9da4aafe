"""Real Git repositories for tests, built with dulwich, served from disk or over smart HTTP.

:func:`commit` writes blobs, trees and a commit straight into a repository's object store
(no work tree, no index), so a repository of 500 files is one call and well under a second:

    path = init(tmp_path / "origin.git")
    commit(path, {f"docs/page{n}.md": f"# Page {n}\\n".encode() for n in range(500)})
    commit(path, {"docs/page7.md": b"changed", "docs/page8.md": None})  # None deletes

A client reaches it as a local path or ``file://`` URL, or over Git's smart HTTP protocol
(https://git-scm.com/docs/http-protocol) through :class:`GitHttpServer`, which serves a
directory of repositories with dulwich's WSGI application and, given ``username`` and
``password``, answers 401 with ``WWW-Authenticate: Basic`` to anyone else:

    with GitHttpServer(tmp_path, username="u", password="p") as base_url:
        url = f"{base_url}/origin.git"
"""

from __future__ import annotations

import base64
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.refs import Ref
from dulwich.repo import Repo
from dulwich.server import DictBackend
from dulwich.web import make_wsgi_chain

BRANCH = Ref(b"refs/heads/main")
AUTHOR = b"Fake Author <author@example.com>"


def init(path: Path) -> Path:
    """An empty bare repository whose HEAD is ``refs/heads/main``."""
    path.mkdir(parents=True, exist_ok=True)
    repo = Repo.init_bare(str(path))
    repo.refs.set_symbolic_ref(Ref(b"HEAD"), BRANCH)
    repo.close()
    return path


def commit(
    path: Path,
    changes: Mapping[str, bytes | None],
    *,
    message: str = "change",
    when: float | None = None,
) -> str:
    """Commit ``changes`` (path -> content, None to delete) on top of ``main``; returns the
    new commit's sha."""
    repo = Repo(str(path))
    try:
        store = repo.object_store
        files: dict[str, tuple[int, ObjectID]] = {}
        parent = repo.refs.as_dict().get(BRANCH)
        if parent is not None:
            head = repo[parent]
            assert isinstance(head, Commit)
            for entry in store.iter_tree_contents(head.tree):
                if entry.path is not None and entry.sha is not None and entry.mode is not None:
                    files[entry.path.decode()] = (entry.mode, entry.sha)
        blobs = []
        for name, content in changes.items():
            if content is None:
                files.pop(name, None)
                continue
            blob = Blob.from_string(content)
            blobs.append(blob)
            files[name] = (stat.S_IFREG | 0o644, blob.id)
        store.add_objects([(b, None) for b in blobs])
        made = Commit()
        made.tree = _write_tree(store.add_object, files)
        made.parents = [parent] if parent is not None else []
        made.author = made.committer = AUTHOR
        stamp = int(time.time() if when is None else when)
        made.author_time = made.commit_time = stamp
        made.author_timezone = made.commit_timezone = 0
        made.encoding = b"UTF-8"
        made.message = message.encode()
        store.add_object(made)
        repo.refs[BRANCH] = made.id
        return made.id.decode()
    finally:
        repo.close()


def populate(path: Path, *, files: int, size: int = 400) -> str:
    """``files`` markdown files of about ``size`` bytes under a few directories."""
    line = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    body = (line * (size // len(line) + 1))[:size]
    contents = {
        f"docs/section{n % 10}/page{n}.md": f"# Page {n}\n\n{body}\n".encode() for n in range(files)
    }
    return commit(path, contents, message=f"{files} files")


def _write_tree(add: Callable[[Any], None], files: Mapping[str, tuple[int, ObjectID]]) -> ObjectID:
    """Nested trees for ``files``; returns the root tree's id."""
    children: dict[str, dict[str, tuple[int, ObjectID]]] = {}
    tree = Tree()
    for name, (mode, sha) in files.items():
        head, _, rest = name.partition("/")
        if rest:
            children.setdefault(head, {})[rest] = (mode, sha)
        else:
            tree.add(head.encode(), mode, sha)
    for head, below in children.items():
        tree.add(head.encode(), stat.S_IFDIR, _write_tree(add, below))
    add(tree)
    return tree.id


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Tests read the repository, not the access log."""


class GitHttpServer:
    """Every bare repository directly under ``root``, served over smart HTTP on 127.0.0.1."""

    def __init__(
        self, root: Path, *, username: str | None = None, password: str | None = None
    ) -> None:
        self.root = root
        self.credentials = (username, password) if username is not None else None
        self.requests = 0
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def _app(self) -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
        repos = {f"/{p.name}": Repo(str(p)) for p in self.root.iterdir() if (p / "HEAD").exists()}
        git = make_wsgi_chain(DictBackend(repos))  # type: ignore[arg-type]

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            self.requests += 1
            if self.credentials is not None:
                expected = "Basic " + base64.b64encode(":".join(self.credentials).encode()).decode()  # type: ignore[arg-type]
                if environ.get("HTTP_AUTHORIZATION") != expected:
                    start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')])
                    return [b"unauthorized"]
            return git(environ, start_response)

        return app

    def __enter__(self) -> str:
        self._httpd = make_server("127.0.0.1", 0, self._app(), handler_class=_QuietHandler)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
