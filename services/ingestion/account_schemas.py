"""Request and response bodies of the ingestion API's usage and API-key routes (seed 003),
apart from the documents' and searches' in :mod:`services.ingestion.schemas`, under the same
rules (strict requests, inputs as :mod:`shared.inputs` reads them)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from services.apikit.schemas import StrictRequest
from services.ingestion.schemas import Name
from shared.inputs import Id

# -- usage ---------------------------------------------------------------------------------


#: What an RFC 3339 date-time (the document's ``format: date-time``) starts with: a number
#: (``until=0.5``) is not read as seconds since 1970.
_DATE_TIME_START = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _date_time_text(value: object) -> object:
    if isinstance(value, str) and not _DATE_TIME_START.match(value):
        raise ValueError("must be an ISO 8601 date-time with a zone, e.g. 2026-12-01T00:00:00Z")
    return value


DateTimeText = Annotated[AwareDatetime, BeforeValidator(_date_time_text)]


class UsageQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    since: DateTimeText | None = Field(None, description="From this time (ISO 8601, with zone).")
    until: DateTimeText | None = Field(None, description="Before this time (ISO 8601, with zone).")


class UsageRow(BaseModel):
    kind: str = Field(description="The event, e.g. kb_document_ingested.")
    knowledge_base_id: int | None
    events: int
    documents: int = Field(description="Distinct documents the events concern.")
    chunks: int = Field(description="Chunks written by the ingestions.")
    tokens: int = Field(description="Tokens in those chunks.")
    embedded: int = Field(description="Chunks sent to the embedder.")
    unchanged: int = Field(description="Ingestions that found the content unchanged.")
    first_at: datetime
    last_at: datetime


class UsageSummary(BaseModel):
    since: datetime | None
    until: datetime | None
    totals: list[UsageRow] = Field(description="Per event kind and knowledge base.")


# -- API keys ------------------------------------------------------------------------------


class ApiKeyCreate(StrictRequest):
    organization_id: Id
    name: Name


class ApiKeyCreated(BaseModel):
    """201: the plain key, shown this once; only its SHA-256 is stored."""

    id: int
    organization_id: int
    name: str
    key: str
    created_at: datetime
