"""SharePoint (Microsoft Graph): the files of a site's document libraries, by delta query.

Protocol (Graph v1.0 under ``/v1.0``, ``Authorization: Bearer <access token>``):

* roots: ``SharepointDrive`` (a document library's drive id): ``GET /sites/{site-id}/drives``
  for each of ``settings.sites`` (``@odata.nextLink`` pages), or ``settings.drives``.
* walk: ``GET /drives/{drive-id}/root/delta`` (``$top``), then each ``@odata.nextLink`` as
  given, until a page carries ``@odata.deltaLink``: that link is the watermark, and an
  incremental walk (``since``) starts from it and lists only what changed. Folders and the
  root are left out; items with the ``deleted`` facet are listed, and ``fetch`` answers None
  for them. Links are followed only on the connection's own Graph host (the token is never
  sent elsewhere). A ``410 Gone`` on a delta link (``resyncRequired`` and its
  ``resyncChanges*`` variants: the token expired) raises ``ResyncRequired`` carrying the
  ``Location`` it names, the start of a fresh enumeration: the caller walks the drive again
  from there, as a complete walk (https://learn.microsoft.com/en-us/onedrive/developer/
  rest-api/api/driveitem_delta, "Error responses").
* fetch: ``GET /drives/{drive-id}/items/{item-id}`` (404 or ``deleted``: None) and, for text
  files (``file.mimeType`` text/*, JSON, XML, Markdown, at most ``settings.max_file_bytes``),
  ``GET .../content``, which answers 302 to a pre-authenticated download URL (followed).
  Other files (Office documents, PDFs) are indexed by name only.
* rate limits: ``RateLimit-Remaining`` / ``RateLimit-Reset`` (seconds from now; SharePoint
  sends them near its limit) recorded on the connection; 429 and 503 with ``Retry-After``
  are a ``Delay`` until then (recorded), 5xx otherwise ``Retryable``, 401/403
  ``Unrecoverable``.

Node ids: ``SharepointDrive`` the drive id; ``SharepointFile`` ``<drive id>/<item id>``.
"""

from __future__ import annotations

from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import requests

from services.connectors.node_http import (
    NodeClient,
    blocked,
    int_header,
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

DEFAULT_BASE_URL = "https://graph.microsoft.com"
PAGE_SIZE = 200
MAX_FILE_BYTES = 1 << 20

DRIVE = "SharepointDrive"
FILE = "SharepointFile"
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-yaml")


class SharepointSource:
    """The files of the connection's SharePoint document libraries."""

    source = "sharepoint"
    root_node_types: tuple[str, ...] = (DRIVE,)
    indexable_node_types: tuple[str, ...] = (FILE,)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        named = conn.settings.get("drives")
        if named:
            return [NodeRef(DRIVE, str(ident)) for ident in named]
        sites = conn.settings.get("sites") or []
        if not sites:
            raise Unrecoverable(f"sharepoint connection {conn.connection_id}: no sites or drives")
        roots: list[NodeRef] = []
        with closing(_client(conn)) as client:
            for site in sites:
                link: str | None = f"/sites/{quote(str(site), safe=',')}/drives"
                while link:
                    body = client.get(link)
                    roots += [NodeRef(DRIVE, str(d["id"])) for d in _values(body)]
                    link = _relative(conn, body.get("@odata.nextLink"))
        return roots

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        drive = root.node_id
        if not drive:
            raise Unrecoverable("sharepoint: empty drive id")
        link = _relative(conn, checkpoint or since)
        if link is None:
            top = int(conn.settings.get("page_size") or PAGE_SIZE)
            link = f"/drives/{quote(drive, safe='!')}/root/delta?{urlencode({'$top': top})}"
        with closing(_client(conn)) as client:
            body = client.get(link)
        refs: list[NodeRef] = []
        dates: dict[NodeRef, datetime] = {}
        for item in _values(body):
            if "file" not in item and "deleted" not in item:
                continue  # folders, the root, packages
            if "deleted" in item and "folder" in item:
                continue
            ref = NodeRef(FILE, f"{drive}/{item['id']}")
            refs.append(ref)
            when = parse_time(item.get("lastModifiedDateTime"))
            if when is not None and "deleted" not in item:
                dates[ref] = when
        following = body.get("@odata.nextLink")
        if following:
            return WalkPage(refs, str(following), dates=dates)
        delta = body.get("@odata.deltaLink")
        if not delta:
            raise Retryable(
                f"sharepoint: a delta page of {drive} with neither nextLink nor deltaLink"
            )
        return WalkPage(refs, None, watermark=str(delta), dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        drive, _, item_id = ref.node_id.partition("/")
        if not drive or not item_id:
            raise Unrecoverable(f"sharepoint: bad node id {ref.node_id!r}")
        path = f"/drives/{quote(drive, safe='!')}/items/{quote(item_id, safe='')}"
        limit = int(conn.settings.get("max_file_bytes") or MAX_FILE_BYTES)
        with closing(_client(conn)) as client:
            try:
                item = client.get(path)
                if "deleted" in item:
                    return None
                mime = str((item.get("file") or {}).get("mimeType") or "")
                text = str(item.get("name") or "")
                media_type: str | None = None
                if mime.startswith(TEXT_TYPES) and int(item.get("size") or 0) <= limit:
                    response = client.request("GET", f"{path}/content")
                    text = response.content.decode("utf-8", errors="replace")
                    media_type = None if mime.startswith("text/plain") else mime
            except NotFound:
                return None
        return Node(
            ref=ref,
            title=str(item.get("name") or item_id),
            text=text,
            url=item.get("webUrl"),
            synchronization_date=parse_time(item.get("lastModifiedDateTime")) or datetime.now(UTC),
            media_type=media_type,
        )


SOURCE: NodeSource = SharepointSource()


def _values(body: Any) -> list[dict[str, Any]]:
    values = body.get("value") if isinstance(body, dict) else None
    if not isinstance(values, list):
        raise Retryable("sharepoint: a Graph collection without `value`")
    return [v for v in values if isinstance(v, dict) and v.get("id")]


def _base(conn: Connection) -> str:
    return (conn.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1.0"


def _relative(conn: Connection, link: Any) -> str | None:
    """A Graph link (absolute, as Graph gives them) as a path under the connection's base;
    a link to any other host is refused."""
    if not link:
        return None
    base = _base(conn)
    text = str(link)
    if text.startswith("/"):
        return text
    if not text.startswith(base + "/"):
        here, there = urlsplit(base), urlsplit(text)
        raise Unrecoverable(
            f"sharepoint: a link to {there.scheme}://{there.netloc} from {here.netloc}: refused"
        )
    return text[len(base) :]


def _client(conn: Connection) -> NodeClient:
    token = conn.credentials.get("access_token") or conn.credentials.get("token")
    if not token:
        raise Unrecoverable(f"sharepoint connection {conn.connection_id}: no access_token")

    def inspect(response: requests.Response, what: str) -> None:
        for answer in (*response.history, response):  # the 302 of a download counts too
            remaining = int_header(answer, "RateLimit-Remaining")
            reset = int_header(answer, "RateLimit-Reset")
            if reset is not None:
                conn.record_quota(remaining, datetime.now(UTC) + timedelta(seconds=reset))
        if response.status_code == 410 and what.endswith("/delta"):
            location = response.headers.get("Location")
            raise ResyncRequired(
                f"sharepoint: {what}: 410 {_error_code(response)}: the delta starts over",
                restart=_relative(conn, location) if location else None,
            )
        until = retry_after(response)
        if response.status_code in (429, 503) and until is not None:
            raise blocked(conn, until, f"sharepoint, {what}")

    return NodeClient(
        _base(conn),
        inspect=inspect,
        headers={"Authorization": f"Bearer {token}"},
        timeout=conn.timeout,
    )


def _error_code(response: requests.Response) -> str:
    """``error.code`` of a Graph error body (``resyncRequired``...)."""
    try:
        return str(response.json()["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return ""
