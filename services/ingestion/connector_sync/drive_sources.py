"""Google Drive and SharePoint as knowledge-base connectors, on the kernel's node sources
(``services.connectors.google_drive``, ``services.connectors.sharepoint``).

A binding's scope is a list of roots (a Drive: My Drive or a shared drive, or a folder's
subtree in one; a SharePoint document library, or every library of a site), walked one
after the other. The checkpoint is ``{"roots", "i", "cp", "wm"}``: the roots (``[type,
id]``), the one being walked, the kernel's checkpoint in it, and the watermarks of the roots
already finished (the pass's watermark is that map, as JSON). An incremental pass walks
each root from its watermark (Drive's ``changes.list`` from the start page token, narrowed
to a folder's subtree for a folder; Graph's ``@odata.deltaLink``): a removed file is listed
there and its ``fetch`` answers None. A full pass lists every file, so what it
does not list is gone (``removal = "listing"``).

Quotas the providers report (Graph's ``RateLimit-*``, a 403/429 with Retry-After) are
recorded on the connection's :class:`~services.connectors.nodes.RateLimitState` by the
kernel; ``blocked_until`` reads it back before every call.

Item ids are the kernel's node ids: ``<drive>/<file id>`` (Drive: ``my-drive/<id>`` or
``<shared drive id>/<id>``; SharePoint: ``<drive id>/<item id>``).

A change token the provider rejects (``ResyncRequired``) turns the pass into a full one from
its first root; the rejected root starts from Graph's ``Location`` when the answer names
one (the checkpoint's ``fresh`` map), as the reference asks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import Field, model_validator

from services.connectors import google_drive, sharepoint
from services.connectors.nodes import Connection, Node, NodeRef, NodeSource, ResyncRequired
from services.ingestion.connector_sync.adapters import (
    HTML,
    MARKDOWN,
    PLAIN,
    ConnectorAccess,
    FetchedItem,
    ListedItem,
    ListedPage,
    StrictSettings,
)
from shared.errors import Unrecoverable
from shared.inputs import Text

_Id = Field(min_length=1, max_length=512, pattern=r"^[^\x00/\s]+$")


class AccessToken(StrictSettings):
    """An OAuth access token (refreshing it is the caller's job)."""

    access_token: Text = Field(min_length=1, max_length=8192)


class NoSettings(StrictSettings):
    pass


class DriveSettings(StrictSettings):
    drive_id: str = Field(
        google_drive.MY_DRIVE,
        min_length=1,
        max_length=512,
        pattern=r"^[^\x00/\s]+$",
        description="`my-drive` (the token's My Drive) or a shared drive's id.",
    )
    export_format: Literal["text", "html"] = Field(
        "text", description="Google Docs exported as plain text or as HTML."
    )
    folder_id: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        pattern=r"^[^\x00/\s]+$",
        description="Only this folder's subtree of the drive.",
    )
    page_size: int = Field(1000, ge=1, le=1000)


class SharepointSettings(StrictSettings):
    site_id: Text | None = Field(
        None, min_length=1, max_length=512, description="Every document library of this site."
    )
    drive_id: Text | None = Field(
        None, min_length=1, max_length=512, description="One document library's drive id."
    )
    page_size: int = Field(200, ge=1, le=1000)
    max_file_bytes: int = Field(1 << 20, ge=1, le=10 << 20)

    @model_validator(mode="after")
    def _one_scope(self) -> SharepointSettings:
        if (self.site_id is None) == (self.drive_id is None):
            raise ValueError("give either site_id or drive_id")
        return self


def _media_type(node: Node) -> str:
    if node.media_type is None:
        return PLAIN
    if node.media_type.startswith("text/html"):
        return HTML
    if node.media_type.startswith("text/markdown"):
        return MARKDOWN
    return node.media_type


class NodeSourceConnector:
    """A kernel node source walked root by root (see the module docstring)."""

    removal: Literal["listing", "proof"] = "listing"
    incremental = True
    credentials_model = AccessToken
    connection_model = NoSettings

    def __init__(self, provider: str, source: NodeSource, file_type: str, base_url: str) -> None:
        self.provider = provider
        self.source = source
        self.file_type = file_type
        self.base_url = base_url

    def default_base_url(self, connection_settings: Mapping[str, Any]) -> str:
        return self.base_url

    def connection(self, access: ConnectorAccess) -> Connection:
        """The kernel's view of the binding's connection."""
        return Connection(
            source=self.provider,
            connection_id=access.connection_id,
            organization_id=access.organization_id,
            base_url=access.base_url,
            credentials=access.credentials,
            settings=self.kernel_settings(access.settings),
            timeout=access.timeout,
            rate_limits=access.rate_limits,
        )

    def kernel_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return dict(settings)

    def roots(self, conn: Connection) -> list[list[str]]:
        return [[ref.node_type, ref.node_id] for ref in self.source.list_roots(conn)]

    def list_page(
        self, access: ConnectorAccess, checkpoint: str | None, since: str | None
    ) -> ListedPage:
        conn = self.connection(access)
        state = _state(checkpoint) or {"roots": self.roots(conn), "i": 0, "cp": None, "wm": {}}
        roots: list[list[str]] = list(state["roots"])
        marks: dict[str, str] = _marks(since)
        index = int(state["i"])
        if index >= len(roots):
            return ListedPage([], None, watermark=json.dumps(state["wm"]))
        node_type, node_id = roots[index]
        root = f"{node_type}:{node_id}"
        since_root = None if state["cp"] else marks.get(root)
        fresh: dict[str, str] = state.get("fresh") or {}
        checkpoint = state["cp"] or fresh.pop(root, None)
        try:
            page = self.source.walk(conn, NodeRef(node_type, node_id), checkpoint, since_root)
        except ResyncRequired as resync:
            # The whole pass starts over as a full one; this root from where the provider
            # says a fresh enumeration begins (Graph's Location), when it says so.
            restart = {"roots": roots, "i": 0, "cp": None, "wm": {}}
            if resync.restart:
                restart["fresh"] = {root: resync.restart}
            raise ResyncRequired(str(resync), restart=json.dumps(restart)) from None
        items = [ListedItem(ref.node_id, page.dates.get(ref)) for ref in page.refs]
        if page.checkpoint is not None:
            state["cp"] = page.checkpoint
        else:
            if page.watermark:
                state["wm"][root] = page.watermark
            state.update(i=index + 1, cp=None)
        if fresh:
            state["fresh"] = fresh
        else:
            state.pop("fresh", None)
        if state["i"] >= len(roots):
            return ListedPage(items, None, watermark=json.dumps(state["wm"]))
        return ListedPage(items, json.dumps(state))

    def fetch(self, access: ConnectorAccess, external_id: str) -> FetchedItem | None:
        node = self.source.fetch(self.connection(access), NodeRef(self.file_type, external_id))
        if node is None:
            return None
        return FetchedItem(
            title=node.title,
            body=node.text,
            media_type=_media_type(node),
            url=node.url,
            modified_at=node.synchronization_date,
        )

    def confirm_gone(self, access: ConnectorAccess, external_ids: Sequence[str]) -> frozenset[str]:
        return frozenset(i for i in external_ids if self.fetch(access, i) is None)

    def blocked_until(self, access: ConnectorAccess) -> datetime | None:
        if access.rate_limits is None:
            return None
        return access.rate_limits.blocked_until(self.connection(access))


class GoogleDriveConnector(NodeSourceConnector):
    settings_model = DriveSettings
    item_pattern = r"^[^\x00/\s]+/[^\x00/\s]+$"
    item_help = "`<drive id or my-drive>/<file id>`"

    def __init__(self) -> None:
        super().__init__(
            "google_drive",
            google_drive.SOURCE,
            google_drive.FILE,
            google_drive.DEFAULT_BASE_URL,
        )

    def kernel_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        drive = settings.get("drive_id") or google_drive.MY_DRIVE
        scope: dict[str, Any] = {"drives": [drive]}
        if settings.get("folder_id"):
            scope = {"folders": [f"{drive}/{settings['folder_id']}"]}
        return {
            **scope,
            "export_format": settings.get("export_format") or "text",
            "page_size": settings.get("page_size") or google_drive.PAGE_SIZE,
        }


class SharepointConnector(NodeSourceConnector):
    settings_model = SharepointSettings
    item_pattern = r"^[^\x00/\s]+/[^\x00/\s]+$"
    item_help = "`<drive id>/<item id>`"

    def __init__(self) -> None:
        super().__init__(
            "sharepoint",
            sharepoint.SOURCE,
            sharepoint.FILE,
            sharepoint.DEFAULT_BASE_URL,
        )

    def kernel_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        scope: dict[str, Any] = (
            {"drives": [settings["drive_id"]]}
            if settings.get("drive_id")
            else {"sites": [settings.get("site_id")]}
        )
        for name in ("page_size", "max_file_bytes"):
            if settings.get(name):
                scope[name] = settings[name]
        return scope


def _state(checkpoint: str | None) -> dict[str, Any] | None:
    if not checkpoint:
        return None
    try:
        state = json.loads(checkpoint)
    except ValueError:
        raise Unrecoverable("connector checkpoint unreadable") from None
    if not isinstance(state, dict) or not isinstance(state.get("roots"), list):
        raise Unrecoverable("connector checkpoint unreadable")
    state.setdefault("wm", {})
    return state


def _marks(since: str | None) -> dict[str, str]:
    if not since:
        return {}
    try:
        marks = json.loads(since)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in marks.items()} if isinstance(marks, dict) else {}
