"""Request and response bodies of the connector routes (connections and bindings).

Requests are strict like the rest of the ingestion API. What a provider needs (its
credential fields, its connection and binding settings, what an item id looks like) is
checked against that provider's adapter (:mod:`services.ingestion.connector_sync`), so a
wrong field answers 400 naming it (``credentials.api_token``, ``settings.drive_id``).
Credentials never come back: a connection shows the names of its credential fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from services.apikit.errors import field_path
from services.apikit.schemas import StrictRequest
from services.ingestion.connector_sync.adapters import KbConnector
from services.ingestion.schemas import Audience, Name
from shared.db.models.kb_connectors import KbConnection, KbConnectorBinding
from shared.egress.addresses import default_guard
from shared.errors import ConflictingFields, ValidationFailed
from shared.inputs import NUL_FREE, NUL_FREE_PATTERN, Id

Provider = Literal["notion", "confluence", "google_drive", "sharepoint", "zendesk"]
FieldName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]*$")]
Secret = Annotated[str, Field(min_length=1, max_length=8192), NUL_FREE]
ItemId = Annotated[str, Field(min_length=1, max_length=1024), NUL_FREE]
_NUL_FREE_TEXT = {"type": "string", "pattern": NUL_FREE_PATTERN}
_SETTING_VALUE = {
    "anyOf": [
        _NUL_FREE_TEXT,
        {"type": ["number", "boolean", "null", "object"]},
        {
            "type": "array",
            "items": {"anyOf": [_NUL_FREE_TEXT, {"type": ["number", "boolean", "null"]}]},
        },
    ]
}
Settings = Annotated[
    dict[str, Any],
    Field(
        json_schema_extra={
            "propertyNames": _NUL_FREE_TEXT,
            "additionalProperties": _SETTING_VALUE,
        },
        max_length=20,
        description="The provider's settings (docs/products/ingestion.md lists them per provider).",
    ),
]


def _names_by_pattern(schema: dict[str, Any]) -> None:
    """Every key is a field name: pydantic writes the key's pattern as ``patternProperties``,
    which leaves a key outside the pattern unconstrained; the validator refuses it, and so
    does the document with the pattern under ``propertyNames``."""
    for pattern, value in schema.pop("patternProperties", {}).items():
        schema.setdefault("propertyNames", {})["pattern"] = pattern
        schema["additionalProperties"] = value


Credentials = Annotated[
    dict[FieldName, Secret],
    Field(
        json_schema_extra=_names_by_pattern,
        min_length=1,
        max_length=10,
        description="Notion: `api_token`; Confluence and Zendesk: `email`, `api_token`; "
        "Google Drive and SharePoint: `access_token`. Stored encrypted; never returned.",
    ),
]


def _fields_per_provider(schema: dict[str, Any]) -> None:
    """The document's ``oneOf``: each provider's credential fields and connection settings,
    from its adapter (what :func:`checked` validates them with)."""
    from services.ingestion.connector_sync.registry import CONNECTORS

    def flat(model: type[BaseModel]) -> dict[str, Any]:
        found = model.model_json_schema()
        found.pop("title", None)
        return found

    branches = []
    for name, connector in sorted(CONNECTORS.items()):
        settings = flat(connector.connection_model)
        branch: dict[str, Any] = {
            "title": name,
            "properties": {
                "provider": {"const": name},
                "credentials": flat(connector.credentials_model),
                "settings": settings,
            },
        }
        if settings.get("required"):
            branch["required"] = ["settings"]
        branches.append(branch)
    schema["oneOf"] = branches


class ConnectionCreate(StrictRequest):
    model_config = ConfigDict(json_schema_extra=_fields_per_provider)

    provider: Provider
    name: Name
    credentials: Credentials
    settings: Settings = Field(
        {},
        description="Confluence: `site`; Zendesk: `subdomain`; the others: none.",
    )


class ConnectionUpdate(StrictRequest):
    """Replace what is given: the credentials (all of them), the settings, the name."""

    name: Name | None = None
    credentials: Credentials | None = None
    settings: Settings | None = None


class ConnectionOut(BaseModel):
    id: int
    provider: Provider
    name: str
    credential_fields: list[str] = Field(
        description="The names of the stored credentials (their values are never returned)."
    )
    settings: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: KbConnection) -> ConnectionOut:
        return cls(
            id=row.id,
            provider=row.provider,
            name=row.name,
            credential_fields=list(row.credential_fields or []),
            settings=dict(row.settings or {}),
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class ConnectionPage(BaseModel):
    connections: list[ConnectionOut]
    next_after: int | None = Field(
        description="Pass as ``after`` for the next page; null on the last page."
    )


class BindingCreate(StrictRequest):
    """Bind the base to a connection (every item in the settings' scope), or, with
    ``item_id``, add one document bound to one provider item."""

    connection_id: Id
    settings: Settings = {}
    item_id: ItemId | None = Field(
        None,
        description="One item instead of a scope: a Notion page id, a Confluence page id, "
        "`<drive>/<file id>` (Google Drive, SharePoint), `<article id>:<locale>` (Zendesk).",
    )
    audience: Audience = []
    sync: bool = Field(True, description="Enqueue the first sync now.")


class DocumentBindingCreate(StrictRequest):
    """Bind an existing document to one provider item: its content is replaced by the
    item's at each sync."""

    connection_id: Id
    item_id: ItemId
    sync: bool = Field(True, description="Enqueue the first sync now.")


class BindingOut(BaseModel):
    id: int
    knowledge_base_id: int
    connection_id: int
    provider: Provider
    item_id: str | None
    document_id: int | None = Field(description="A single-item binding's document.")
    settings: dict[str, Any]
    audience: list[str]
    pass_mode: Literal["full", "incremental"] | None = Field(
        description="The pass under way (resumable), if any."
    )
    last_synced_at: datetime | None
    last_error: str | None
    sync_failures: int
    next_sync_at: datetime | None = Field(
        description="When the refresh tick syncs it next (the base's refresh schedule, else "
        "the recrawl interval; backed off after failures)."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: KbConnectorBinding) -> BindingOut:
        names = [n for n in cls.model_fields if n not in ("settings", "audience")]
        values = {name: getattr(row, name) for name in names}
        return cls(settings=dict(row.settings or {}), audience=list(row.audience or []), **values)


class BindingAccepted(BindingOut):
    """201 (created) or 202 (sync requested): the binding and its sync job."""

    job_id: str | None = Field(description="The sync job, when one was requested.")
    enqueued: bool = Field(
        description="The sync job is queued; false when none was asked for or the queue was "
        "unavailable (the refresh tick enqueues a binding whose sync is due)."
    )


class BindingList(BaseModel):
    bindings: list[BindingOut]


class SyncBody(StrictRequest):
    full: bool = Field(
        False,
        description="List everything, not only what changed since the last pass (Google "
        "Drive, SharePoint); a full pass also removes what it no longer lists.",
    )


def checked(connector: KbConnector, model: type[BaseModel], values: Any, prefix: str) -> Any:
    """``values`` validated by the provider's ``model`` (a dict of what it keeps). Raises
    ValidationFailed naming each bad field under ``prefix``."""
    try:
        return model.model_validate(values).model_dump(mode="json", exclude_defaults=True)
    except ValidationError as exc:
        errors: dict[str, str] = {}
        for item in exc.errors(include_url=False):
            errors.setdefault(field_path((prefix, *item["loc"])), item["msg"])
        raise ValidationFailed(errors) from None


def fitted(connector: KbConnector, model: type[BaseModel], values: Any, prefix: str) -> Any:
    """:func:`checked` for a body that names a stored connection rather than a provider:
    the API document lists every provider's fields, so a refusal here is a body that does
    not fit the stored connection's provider, ConflictingFields (409) naming each field. A
    NUL in a value stays a 400, as everywhere (the document's values are NUL-free)."""
    try:
        return model.model_validate(values).model_dump(mode="json", exclude_defaults=True)
    except ValidationError as exc:
        items = exc.errors(include_url=False)
        errors: dict[str, str] = {}
        for item in items:
            errors.setdefault(field_path((prefix, *item["loc"])), item["msg"])
        if any(item["type"] == "nul_character" for item in items):
            raise ValidationFailed(errors) from None
        raise _not_fitting(connector, errors) from None


def _not_fitting(connector: KbConnector, errors: dict[str, str]) -> ConflictingFields:
    provider = connector.provider
    return ConflictingFields(
        {
            path: f"{message} (the connection's provider is {provider})"
            for path, message in errors.items()
        }
    )


def checked_host(connector: KbConnector, settings: Mapping[str, Any], prefix: str) -> None:
    """Refuse connection ``settings`` whose provider host (``site``...) is an address the
    egress guard refuses: ValidationFailed naming the field that made the host."""
    url = connector.default_base_url(settings)
    reason = default_guard().refusal(urlsplit(url).hostname or "") if url else None
    if reason is None:
        return
    named = [k for k, v in settings.items() if isinstance(v, str) and v and v.lower() in url]
    field = field_path((prefix, named[0])) if named else prefix
    raise ValidationFailed({field: f"refused: {reason}"})


def checked_item(connector: KbConnector, item_id: str) -> str:
    """``item_id`` as the stored connection's provider names an item; ConflictingFields
    (409) when it is not (the document lists every provider's forms)."""
    if not re.fullmatch(connector.item_pattern, item_id):
        raise _not_fitting(connector, {"item_id": f"must be {connector.item_help}"})
    return item_id
