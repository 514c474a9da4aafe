"""Google Drive: the files of a drive (My Drive or a shared drive), Google Docs exported as text.

Protocol (Drive API v3 under ``/drive/v3``, ``Authorization: Bearer <access token>``):

* roots: ``GoogleDrive`` ``my-drive`` (the user's My Drive) plus the shared drives of
  ``GET /drives`` (``pageToken`` / ``nextPageToken``), or ``settings.drives``; or
  ``GoogleDriveFolder`` ``<drive>/<folder id>`` for each of ``settings.folders``.
* a folder's walk lists its subtree: ``GET /files?q='<folder>' in parents and trashed =
  false`` folder by folder (subfolders queued as they are listed, in the checkpoint), after
  ``changes.getStartPageToken``. Its watermark is ``{"start": token, "folders": [ids]}``;
  the incremental walk reads ``changes.list`` and keeps the files whose ``parents`` are in
  the subtree (a folder created in it joins it), plus removed files (their ``fetch``
  answers None). A file moved out of the subtree is left to the next complete walk.
* complete walk: ``GET /changes/startPageToken`` first (changes made while the walk runs are
  listed by the next walk), then ``GET /files?q=trashed=false&fields=nextPageToken,files(...)``
  page by page (``pageToken`` / ``nextPageToken``; shared drives with ``corpora=drive&
  driveId=&includeItemsFromAllDrives=true&supportsAllDrives=true``). Folders and shortcuts are
  left out. The watermark is the start page token.
* incremental walk (``since`` = that token): ``GET /changes?pageToken=`` until a page carries
  ``newStartPageToken`` (the next watermark); removed or trashed files are listed too and
  ``fetch`` answers None for them. A token ``changes.list`` rejects (400, 404, 410) raises
  ``ResyncRequired``: the caller discards it and walks again as a complete walk, as the
  reference asks (``ChangeList.nextPageToken``: "If the token is rejected for any reason, it
  should be discarded, and pagination should be restarted from the first page").
* fetch: ``GET /files/{id}?fields=...``; a Google Doc is ``GET /files/{id}/export?mimeType=
  text/plain`` (``settings.export_format: html``: ``text/html``), a Sheet ``text/csv``, a
  Slides deck ``text/plain``; any other file ``GET /files/{id}?alt=media`` (text types only,
  others keep their name as text). Trashed or 404: None.
* rate limits: Drive sends no quota headers. Its limit answers are 429 and 403 with reason
  ``userRateLimitExceeded`` / ``rateLimitExceeded`` / ``dailyLimitExceeded`` /
  ``sharingRateLimitExceeded``: a ``Delay`` until ``Retry-After`` when given; a 403 limit
  without it waits ``settings.rate_limit_wait`` (default ``DEFAULT_WAIT`` s) the first time,
  then a truncated exponential backoff with jitter while it repeats (at most
  ``rate_limit_backoff_max_seconds``), recorded on the connection; a 429 without
  Retry-After is ``Retryable`` (the platform's backoff, as Google asks). 5xx: ``Retryable``;
  401: ``Unrecoverable`` (invalid credentials); any other 403 is ``Unrecoverable`` naming
  its reason (``insufficientFilePermissions``, ``cannotExportFile``...): one file's refusal,
  not the connection's credentials.

Node ids: ``GoogleDrive`` the drive id (``my-drive``); ``GoogleDriveFile`` ``<drive>/<file id>``.
"""

from __future__ import annotations

import json
from contextlib import closing
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import requests

from services.connectors.node_http import (
    NodeClient,
    backed_off,
    blocked,
    parse_time,
    retry_after,
)
from services.connectors.nodes import (
    Connection,
    Node,
    NodeRef,
    NodeSource,
    ResyncRequired,
    WalkPage,
)
from shared.errors import Retryable, Unrecoverable
from shared.http import NotFound

DEFAULT_BASE_URL = "https://www.googleapis.com"
PAGE_SIZE = 1000
DEFAULT_WAIT = 30.0
MY_DRIVE = "my-drive"

DRIVE = "GoogleDrive"
FOLDER_ROOT = "GoogleDriveFolder"
FILE = "GoogleDriveFile"

FOLDER = "application/vnd.google-apps.folder"
#: Google Workspace types and the format each is exported in (text or HTML for Docs).
EXPORTS = {
    "application/vnd.google-apps.document": "text/plain",
    "application/vnd.google-apps.spreadsheet": "text/csv",
    "application/vnd.google-apps.presentation": "text/plain",
}
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-yaml")
FILE_FIELDS = "id,name,mimeType,modifiedTime,webViewLink,trashed,parents"
LIST_FIELDS = f"nextPageToken,files({FILE_FIELDS})"
CHANGE_FIELDS = f"nextPageToken,newStartPageToken,changes(fileId,removed,time,file({FILE_FIELDS}))"
#: 403 reasons that are limits, not permissions: they wait (a growing backoff), whatever the
#: file (https://developers.google.com/workspace/drive/api/guides/handle-errors).
RATE_REASONS = (
    "userRateLimitExceeded",
    "rateLimitExceeded",
    "dailyLimitExceeded",
    "sharingRateLimitExceeded",
)
#: A page token ``changes.list`` rejects: discarded, and the walk starts over ("If the token
#: is rejected for any reason, it should be discarded, and pagination should be restarted",
#: https://developers.google.com/workspace/drive/api/reference/rest/v3/changes/list).
TOKEN_REJECTED = (400, 404, 410)


class GoogleDriveSource:
    """The files of the connection's drives; Google Docs read through their export."""

    source = "google_drive"
    root_node_types: tuple[str, ...] = (DRIVE, FOLDER_ROOT)
    indexable_node_types: tuple[str, ...] = (FILE,)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        folders = conn.settings.get("folders")
        if folders:
            return [NodeRef(FOLDER_ROOT, str(ident)) for ident in folders]
        named = conn.settings.get("drives")
        if named:
            return [NodeRef(DRIVE, str(ident)) for ident in named]
        roots = [NodeRef(DRIVE, MY_DRIVE)]
        with closing(_client(conn)) as client:
            token: str | None = ""
            while token is not None:
                query = {"pageSize": 100, "fields": "nextPageToken,drives(id,name)"}
                if token:
                    query["pageToken"] = token
                body = client.get(f"/drives?{urlencode(query)}")
                roots += [NodeRef(DRIVE, str(d["id"])) for d in body.get("drives") or []]
                token = body.get("nextPageToken") or None
        return roots

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        if root.node_type == FOLDER_ROOT:
            return _folder_walk(conn, root.node_id, checkpoint, since)
        state = _state(checkpoint)
        drive = root.node_id
        with closing(_client(conn)) as client:
            if state.get("changes") or (since and not state):
                return _changes_page(client, drive, str(state.get("changes") or since))
            start = state.get("start") or _start_token(client, drive)
            query: dict[str, Any] = {
                "q": "trashed = false",
                "fields": LIST_FIELDS,
                "pageSize": int(conn.settings.get("page_size") or PAGE_SIZE),
                **_drive_params(drive),
            }
            if state.get("page"):
                query["pageToken"] = state["page"]
            body = client.get(f"/files?{urlencode(query)}")
        refs, dates = _refs(drive, body.get("files"), "files")
        following = body.get("nextPageToken")
        if not following:
            return WalkPage(refs, None, watermark=start, dates=dates)
        return WalkPage(refs, json.dumps({"start": start, "page": following}), dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        drive, _, file_id = ref.node_id.rpartition("/")
        if not drive or not file_id:
            raise Unrecoverable(f"google_drive: bad node id {ref.node_id!r}")
        path = f"/files/{quote(file_id, safe='')}"
        with closing(_client(conn)) as client:
            try:
                meta = client.get(f"{path}?{urlencode({'fields': FILE_FIELDS, **_all()})}")
                if meta.get("trashed"):
                    return None
                text, media_type = _content(client, path, str(meta.get("mimeType") or ""), conn)
            except NotFound:
                return None
        return Node(
            ref=ref,
            title=str(meta.get("name") or file_id),
            text=text if text is not None else str(meta.get("name") or ""),
            url=meta.get("webViewLink"),
            synchronization_date=parse_time(meta.get("modifiedTime")) or datetime.now(UTC),
            media_type=media_type,
        )


SOURCE: NodeSource = GoogleDriveSource()


def _state(checkpoint: str | None) -> dict[str, Any]:
    if not checkpoint:
        return {}
    try:
        raw = json.loads(checkpoint)
    except ValueError:
        return {}  # a checkpoint from another version: start over
    return raw if isinstance(raw, dict) else {}


def _all() -> dict[str, str]:
    return {"supportsAllDrives": "true"}


def _drive_params(drive: str) -> dict[str, str]:
    if drive == MY_DRIVE:
        return {"corpora": "user"}
    return {
        "corpora": "drive",
        "driveId": drive,
        "includeItemsFromAllDrives": "true",
        **_all(),
    }


def _start_token(client: NodeClient, drive: str) -> str:
    query = {} if drive == MY_DRIVE else {"driveId": drive, **_all()}
    body = client.get(f"/changes/startPageToken?{urlencode(query)}")
    token = body.get("startPageToken")
    if not isinstance(token, str) or not token:
        raise Retryable("google_drive: changes.getStartPageToken answered no token")
    return token


def _changes_page(client: NodeClient, drive: str, token: str) -> WalkPage:
    query: dict[str, Any] = {"pageToken": token, "pageSize": PAGE_SIZE, "fields": CHANGE_FIELDS}
    if drive != MY_DRIVE:
        query.update(driveId=drive, includeItemsFromAllDrives="true", **_all())
    body = client.get(f"/changes?{urlencode(query)}")
    files: list[dict[str, Any]] = []
    for change in body.get("changes") or []:
        file = change.get("file") or {}
        if change.get("removed") or not file:
            files.append({"id": change.get("fileId"), "modifiedTime": change.get("time")})
        else:
            files.append(file)
    refs, dates = _refs(drive, files, "changes")
    if body.get("newStartPageToken"):
        return WalkPage(refs, None, watermark=str(body["newStartPageToken"]), dates=dates)
    following = body.get("nextPageToken")
    if not following:
        raise Retryable("google_drive: a changes page with neither nextPageToken nor newStart")
    return WalkPage(refs, json.dumps({"changes": following}), dates=dates)


def _folder_walk(
    conn: Connection, root_id: str, checkpoint: str | None, since: str | None
) -> WalkPage:
    """One page of a folder subtree's walk (see the module docstring)."""
    drive, _, folder = root_id.rpartition("/")
    if not drive or not folder:
        raise Unrecoverable(f"google_drive: bad folder root {root_id!r}")
    state = _state(checkpoint)
    with closing(_client(conn)) as client:
        if state.get("changes") or (since and not state):
            mark = state or _state(since)
            return _folder_changes(client, drive, mark)
        start = state.get("start") or _start_token(client, drive)
        queue: list[str] = list(state.get("queue") or [folder])
        folders: list[str] = list(state.get("folders") or [folder])
        query: dict[str, Any] = {
            "q": f"'{queue[0]}' in parents and trashed = false",
            "fields": LIST_FIELDS,
            "pageSize": int(conn.settings.get("page_size") or PAGE_SIZE),
            **_drive_params(drive),
        }
        if state.get("page"):
            query["pageToken"] = state["page"]
        body = client.get(f"/files?{urlencode(query)}")
    files = body.get("files")
    refs, dates = _refs(drive, files, "files")
    for file in files or []:
        if file.get("mimeType") == FOLDER and file.get("id") and file["id"] not in folders:
            folders.append(str(file["id"]))
            queue.append(str(file["id"]))
    following = body.get("nextPageToken")
    if not following:
        queue = queue[1:]
    if not following and not queue:
        return WalkPage(
            refs, None, watermark=json.dumps({"start": start, "folders": folders}), dates=dates
        )
    after = {"start": start, "queue": queue, "folders": folders, "page": following}
    return WalkPage(refs, json.dumps(after), dates=dates)


def _folder_changes(client: NodeClient, drive: str, mark: dict[str, Any]) -> WalkPage:
    """A page of ``changes.list`` narrowed to a folder subtree (``mark["folders"]``)."""
    folders: list[str] = list(mark.get("folders") or [])
    token = str(mark.get("changes") or mark.get("start") or "")
    if not token or not folders:
        raise Unrecoverable("google_drive: a folder watermark without its token or folders")
    query: dict[str, Any] = {"pageToken": token, "pageSize": PAGE_SIZE, "fields": CHANGE_FIELDS}
    if drive != MY_DRIVE:
        query.update(driveId=drive, includeItemsFromAllDrives="true", **_all())
    body = client.get(f"/changes?{urlencode(query)}")
    kept: list[dict[str, Any]] = []
    for change in body.get("changes") or []:
        file = change.get("file") or {}
        if change.get("removed") or not file:
            kept.append({"id": change.get("fileId"), "modifiedTime": change.get("time")})
            continue
        if not set(file.get("parents") or []) & set(folders):
            continue
        if file.get("mimeType") == FOLDER and file.get("id") not in folders:
            folders.append(str(file["id"]))
        kept.append(file)
    refs, dates = _refs(drive, kept, "changes")
    if body.get("newStartPageToken"):
        mark = {"start": str(body["newStartPageToken"]), "folders": folders}
        return WalkPage(refs, None, watermark=json.dumps(mark), dates=dates)
    following = body.get("nextPageToken")
    if not following:
        raise Retryable("google_drive: a changes page with neither nextPageToken nor newStart")
    return WalkPage(refs, json.dumps({"changes": following, "folders": folders}), dates=dates)


def _refs(drive: str, files: Any, what: str) -> tuple[list[NodeRef], dict[NodeRef, datetime]]:
    if not isinstance(files, list):
        raise Retryable(f"google_drive: {what} page without a list")
    refs: list[NodeRef] = []
    dates: dict[NodeRef, datetime] = {}
    for file in files:
        if not file.get("id") or file.get("mimeType") in (
            FOLDER,
            "application/vnd.google-apps.shortcut",
        ):
            continue
        ref = NodeRef(FILE, f"{drive}/{file['id']}")
        refs.append(ref)
        when = parse_time(file.get("modifiedTime"))
        if when is not None and not file.get("trashed"):
            dates[ref] = when
    return refs, dates


def _content(
    client: NodeClient, path: str, mime: str, conn: Connection
) -> tuple[str | None, str | None]:
    """The file's text and its media type when not plain text (None, None: binary)."""
    export = EXPORTS.get(mime)
    if (
        mime == "application/vnd.google-apps.document"
        and conn.settings.get("export_format") == "html"
    ):
        export = "text/html"
    if export is not None:
        response = client.request("GET", f"{path}/export?{urlencode({'mimeType': export})}")
        media_type = export
    elif mime.startswith(TEXT_TYPES):
        response = client.request("GET", f"{path}?{urlencode({'alt': 'media', **_all()})}")
        media_type = mime
    else:
        return None, None  # binary (PDF, images): indexed by name only
    text = response.content.decode("utf-8", errors="replace")
    return text, None if media_type == "text/plain" else media_type


def _client(conn: Connection) -> NodeClient:
    token = conn.credentials.get("access_token") or conn.credentials.get("token")
    if not token:
        raise Unrecoverable(f"google_drive connection {conn.connection_id}: no access_token")

    def inspect(response: requests.Response, what: str) -> None:
        if what == "GET /changes" and response.status_code in TOKEN_REJECTED:
            raise ResyncRequired(
                f"google_drive: changes.list rejected the page token "
                f"(HTTP {response.status_code} {_reason(response) or ''}): a complete walk"
            )
        until = retry_after(response)
        if response.status_code in (429, 503) and until is not None:
            raise blocked(conn, until, f"google_drive, {what}")
        if response.status_code != 403:
            return
        reason = _reason(response)
        if reason in RATE_REASONS:
            if until is not None:
                raise blocked(conn, until, f"google_drive {reason}, {what}")
            wait = float(conn.settings.get("rate_limit_wait") or DEFAULT_WAIT)
            raise backed_off(conn, wait, f"google_drive {reason}, {what}")
        raise Unrecoverable(f"{what}: HTTP 403 {reason or 'forbidden'}: {_message(response)}")

    base = (conn.base_url or DEFAULT_BASE_URL).rstrip("/") + "/drive/v3"
    return NodeClient(
        base, inspect=inspect, headers={"Authorization": f"Bearer {token}"}, timeout=conn.timeout
    )


def _message(response: requests.Response) -> str:
    """``error.message`` of a Google error body, shortened."""
    try:
        return str(response.json()["error"]["message"])[:200]
    except (ValueError, KeyError, TypeError):
        return ""


def _reason(response: requests.Response) -> str:
    """The first ``error.errors[].reason`` of a Google error body."""
    try:
        errors = response.json()["error"]["errors"]
        return str(errors[0]["reason"])
    except (ValueError, KeyError, IndexError, TypeError):
        return ""
