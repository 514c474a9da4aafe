"""A local HTTP server speaking the Google Drive API v3: files, export, changes, shared drives.

Checked against Google's published reference:

* https://developers.google.com/workspace/drive/api/reference/rest/v3/files/list (``q``,
  ``pageSize`` <= 1000, ``pageToken``; answer ``{kind: "drive#fileList", nextPageToken,
  incompleteSearch, files}``, ``nextPageToken`` absent on the last page; ``corpora``,
  ``driveId``, ``includeItemsFromAllDrives``, ``supportsAllDrives``)
* https://developers.google.com/workspace/drive/api/guides/search-files (``q``: ``'<folder
  id>' in parents`` lists a folder's children, ``trashed = false``; terms joined by ``and``)
  and .../reference/rest/v3/files (``parents``: the ids of a file's parent folders; a file
  at a drive's top has the drive's root folder, whose alias is ``root`` in My Drive and the
  shared drive's id in a shared drive)
* https://developers.google.com/workspace/drive/api/guides/fields-parameter (``fields``:
  a partial response, e.g. ``nextPageToken,files(id,name)``)
* https://developers.google.com/workspace/drive/api/reference/rest/v3/files/export
  (``mimeType``: ``text/plain``, ``text/html`` for Docs, ``text/csv`` for Sheets; the body
  is the exported content) and ``files.get`` with ``alt=media`` (the file's bytes)
* https://developers.google.com/workspace/drive/api/reference/rest/v3/changes/getStartPageToken
  (``{kind: "drive#startPageToken", startPageToken}``) and .../changes/list (``pageToken``
  required; ``{kind: "drive#changeList", nextPageToken | newStartPageToken, changes:
  [{kind: "drive#change", changeType: "file", fileId, removed, time, file}]}``)
* https://developers.google.com/workspace/drive/api/reference/rest/v3/drives/list
* https://developers.google.com/workspace/drive/api/guides/handle-errors (error body
  ``{error: {code, message, errors: [{domain, reason, message}]}}``; 403
  ``userRateLimitExceeded`` / ``rateLimitExceeded``, 429 ``rateLimitExceeded``, 404
  ``notFound``, 401 ``authError``)

* .../reference/rest/v3/changes/list (``ChangeList.nextPageToken``: "If the token is
  rejected for any reason, it should be discarded, and pagination should be restarted from
  the first page of results"): :meth:`expire_change_tokens` makes every page token issued so
  far rejected, with 400, 404 or 410, as a token Drive no longer honours.

google-api-python-client reaches it with its bundled discovery document
(``build("drive", "v3", static_discovery=True, client_options={"api_endpoint":
f"{base_url}/drive/v3/"})``). ``fields`` is honoured for the top-level keys only (the SDK and
the connector see the same shape either way). Authorization: ``Authorization: Bearer
<token>`` or ``?key=<developer key>`` (``token``, or any of ``tokens``: several users of one
server), else 401. Rate limit: ``rate_limit=N`` requests per ``rate_window`` seconds **per
token**, then 403 ``userRateLimitExceeded``: Drive's per-user quota ("queries per minute per
user per project", https://developers.google.com/workspace/drive/api/guides/limits), so
one user's burst does not throttle another's.

Large data sets: ``server.populate(MY_DRIVE, files=5000)`` builds Google Docs in memory;
:meth:`touch` edits one (a change is recorded), :meth:`remove` deletes one; ``add(...,
parent=folder.id)`` puts a file (or a folder: ``mime_type=FOLDER``) in a folder.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

#: ``'<folder id>' in parents`` in a files.list query.
_PARENT = re.compile(r"'([^']+)' in parents")

MY_DRIVE = "my-drive"
BASE_TIME = 1_767_225_600  # 2026-01-01T00:00:00Z
DOC = "application/vnd.google-apps.document"
FOLDER = "application/vnd.google-apps.folder"
PREFIX = "/drive/v3"


@dataclass
class FakeFile:
    id: str
    drive: str
    name: str
    mime_type: str
    content: str
    modified: float
    trashed: bool = False
    parent: str | None = None

    def parent_id(self) -> str:
        """Its parent folder: the one it was put in, else the drive's root folder."""
        return self.parent or ("root" if self.drive == MY_DRIVE else self.drive)

    def resource(self) -> dict[str, Any]:
        return {
            "kind": "drive#file",
            "id": self.id,
            "name": self.name,
            "mimeType": self.mime_type,
            "modifiedTime": iso(self.modified),
            "webViewLink": f"https://docs.google.com/document/d/{self.id}/edit",
            "trashed": self.trashed,
            "parents": [self.parent_id()],
            **({} if self.drive == MY_DRIVE else {"driveId": self.drive}),
        }


class GoogleDriveServer(ProtocolServer):
    def __init__(
        self,
        token: str,
        *,
        rate_limit: int | None = None,
        rate_window: float = 1.0,
        tokens: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.token = token
        self.tokens = frozenset((token, *tokens))
        self.files: dict[str, FakeFile] = {}
        self.drives: dict[str, str] = {}  # shared drive id -> name
        #: the change log: (change number, file id, removed)
        self.changes: list[tuple[int, str, bool]] = []
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self._windows: dict[str, tuple[float, int]] = {}
        self._data_lock = threading.Lock()
        self._counter = 0
        #: the next requests whose path starts with the key answer 403 with these reasons
        self._refusals: list[tuple[str, str]] = []
        #: page tokens below this are rejected with ``_expired_status``
        self._expired_below = 0
        self._expired_status = 410

    # -- data ----------------------------------------------------------------------------

    def add(
        self,
        drive: str,
        name: str,
        content: str,
        *,
        mime_type: str = DOC,
        modified: float | None = None,
        parent: str | None = None,
    ) -> FakeFile:
        with self._data_lock:
            self._counter += 1
            ident = f"f{self._counter:07d}{drive[:4]}"
            file = FakeFile(
                ident,
                drive,
                name,
                mime_type,
                content,
                modified or BASE_TIME + self._counter,
                parent=parent,
            )
            self.files[ident] = file
            self.changes.append((len(self.changes) + 1, ident, False))
            return file

    def populate(self, drive: str, files: int) -> list[FakeFile]:
        if drive != MY_DRIVE:
            self.drives.setdefault(drive, f"Drive {drive}")
        return [self.add(drive, f"Doc {i}", f"Body of doc {i} in {drive}.") for i in range(files)]

    def touch(self, file_id: str, content: str) -> None:
        with self._data_lock:
            file = self.files[file_id]
            file.content = content
            file.modified = max(file.modified + 1, time.time())
            self.changes.append((len(self.changes) + 1, file_id, False))

    def remove(self, file_id: str) -> None:
        with self._data_lock:
            del self.files[file_id]
            self.changes.append((len(self.changes) + 1, file_id, True))

    def refuse(self, reason: str, *, path: str = "", times: int = 1) -> None:
        """The next ``times`` requests under ``path`` answer 403 with ``reason``
        (``dailyLimitExceeded``, ``insufficientFilePermissions``...: the handle-errors guide)."""
        with self._data_lock:
            self._refusals.extend([(PREFIX + path, reason)] * times)

    def expire_change_tokens(self, status: int = 410) -> None:
        """Reject every page token issued so far with ``status`` (400, 404 or 410)."""
        with self._data_lock:
            self._expired_below = len(self.changes) + 1
            self._expired_status = status

    # -- protocol ------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        return _caller(request) in self.tokens

    def status_reply(self, status: int, message: str) -> Reply:
        reason = {
            401: "authError",
            403: "userRateLimitExceeded",
            404: "notFound",
            429: "rateLimitExceeded",
        }.get(status, "backendError")
        return Reply(
            status,
            {
                "error": {
                    "code": status,
                    "message": message,
                    "errors": [{"domain": "usageLimits", "reason": reason, "message": message}],
                }
            },
        )

    def route(self, request: Request) -> Reply:
        if self._over_limit(_caller(request)):
            return self.status_reply(403, "User rate limit exceeded.")
        refused = self._refused(request.path)
        if refused is not None:
            return refused
        path = request.path.removeprefix(PREFIX)
        if request.method != "GET" or path == request.path:
            return self.status_reply(404, "not found")
        if path == "/files":
            return self._list(request)
        if path == "/changes/startPageToken":
            return Reply(200, {"kind": "drive#startPageToken", "startPageToken": self._head()})
        if path == "/changes":
            return self._changes(request)
        if path == "/drives":
            drives = [
                {"kind": "drive#drive", "id": d, "name": n} for d, n in sorted(self.drives.items())
            ]
            return Reply(200, {"kind": "drive#driveList", "drives": drives})
        parts = path.strip("/").split("/")
        if parts[0] == "files" and len(parts) in (2, 3):
            file = self.files.get(parts[1])
            if file is None:
                return self.status_reply(404, f"File not found: {parts[1]}.")
            if len(parts) == 3 and parts[2] == "export":
                return self._export(file, request.param("mimeType") or "")
            if len(parts) == 2 and request.param("alt") == "media":
                if file.mime_type.startswith("application/vnd.google-apps"):
                    return self.status_reply(
                        403,
                        "Only files with binary content can be downloaded. Use Export.",
                    )
                return Reply(200, file.content.encode(), {"Content-Type": file.mime_type})
            if len(parts) == 2:
                return Reply(200, _fields(file.resource(), request.param("fields")))
        return self.status_reply(404, "not found")

    def _refused(self, path: str) -> Reply | None:
        with self._data_lock:
            found = next((n for n, (p, _) in enumerate(self._refusals) if path.startswith(p)), None)
            if found is None:
                return None
            _, reason = self._refusals.pop(found)
        message = f"The request was refused: {reason}."
        error = {"domain": "usageLimits", "reason": reason, "message": message}
        return Reply(403, {"error": {"code": 403, "message": message, "errors": [error]}})

    def _over_limit(self, caller: str) -> bool:
        if self.rate_limit is None:
            return False
        with self._data_lock:
            start, count = self._windows.get(caller, (0.0, 0))
            now = time.monotonic()
            if now - start >= self.rate_window:
                start, count = now, 0
            self._windows[caller] = (start, count + 1)
            return count + 1 > self.rate_limit

    def _head(self) -> str:
        return str(len(self.changes) + 1)

    def _list(self, request: Request) -> Reply:
        size = min(int(request.param("pageSize") or 100), 1000)
        offset = int(request.param("pageToken") or 0)
        drive = request.param("driveId") if request.param("corpora") == "drive" else MY_DRIVE
        query = request.param("q") or ""
        within = _PARENT.search(query)
        with self._data_lock:
            chosen = [
                f
                for f in self.files.values()
                if f.drive == drive
                and not ("trashed = false" in query and f.trashed)
                and (within is None or within.group(1) == f.parent_id())
            ]
        page = chosen[offset : offset + size]
        body: dict[str, Any] = {
            "kind": "drive#fileList",
            "incompleteSearch": False,
            "files": [f.resource() for f in page],
        }
        if offset + size < len(chosen):
            body["nextPageToken"] = str(offset + size)
        return Reply(200, _fields(body, request.param("fields")))

    def _changes(self, request: Request) -> Reply:
        token = request.param("pageToken")
        if not token or not token.isdigit():
            return Reply(400, {"error": {"code": 400, "message": "Invalid pageToken"}})
        size = min(int(request.param("pageSize") or 100), 1000)
        drive = request.param("driveId") or MY_DRIVE
        start = int(token)
        if start < self._expired_below:
            status = self._expired_status
            reason = {400: "invalid", 404: "notFound"}.get(status, "deleted")
            message = f"The page token {token} is no longer valid."
            return Reply(
                status,
                {
                    "error": {
                        "code": status,
                        "message": message,
                        "errors": [{"domain": "global", "reason": reason, "message": message}],
                    }
                },
            )
        with self._data_lock:
            window = self.changes[start - 1 : start - 1 + size]
            head = len(self.changes) + 1
            items = []
            for number, file_id, removed in window:
                file = self.files.get(file_id)
                if file is not None and file.drive != drive:
                    continue
                change: dict[str, Any] = {
                    "kind": "drive#change",
                    "changeType": "file",
                    "fileId": file_id,
                    "removed": removed or file is None,
                    "time": iso(BASE_TIME + number),
                }
                if file is not None and not removed:
                    change["file"] = file.resource()
                items.append(change)
        body: dict[str, Any] = {"kind": "drive#changeList", "changes": items}
        following = start + len(window)
        if following >= head:
            body["newStartPageToken"] = str(head)
        else:
            body["nextPageToken"] = str(following)
        return Reply(200, _fields(body, request.param("fields")))

    def _export(self, file: FakeFile, mime: str) -> Reply:
        if file.mime_type != DOC:
            return Reply(
                400, {"error": {"code": 400, "message": "Export only supports Docs Editors files."}}
            )
        if mime == "text/plain":
            return Reply(200, file.content.encode(), {"Content-Type": "text/plain"})
        if mime == "text/html":
            html = f"<html><body><p>{file.content}</p></body></html>"
            return Reply(200, html.encode(), {"Content-Type": "text/html"})
        return Reply(400, {"error": {"code": 400, "message": f"bad export mimeType {mime}"}})


def _caller(request: Request) -> str:
    """The token a request carries (bearer or developer key)."""
    bearer = request.headers.get("authorization", "")
    return (
        bearer.removeprefix("Bearer ")
        if bearer.startswith("Bearer ")
        else request.param("key") or ""
    )


def _fields(body: dict[str, Any], fields: str | None) -> dict[str, Any]:
    """A partial response: the top-level keys ``fields`` names (``files(id,name)`` keeps
    ``files`` whole)."""
    if not fields or fields == "*":
        return body
    keep: set[str] = set()
    depth, word = 0, ""
    for char in fields + ",":
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            keep.add(word.strip().split("/")[0])
            word = ""
            continue
        if depth == 0 and char not in "()":
            word += char
    return {k: v for k, v in body.items() if k in keep}
