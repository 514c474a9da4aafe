"""Usage route: what the organization's ingestion cost, from its usage events."""

from __future__ import annotations

from flask.typing import ResponseReturnValue

from services.apikit.openapi import describe
from services.apikit.validation import parse_fields
from services.ingestion import store
from services.ingestion.account_schemas import UsageQuery, UsageRow, UsageSummary
from services.ingestion.api_auth import current_organization_id
from services.ingestion.routes.context import AUTH, answer, query_args, request_session


def summary_of(totals: list[store.UsageTotals], query: UsageQuery) -> UsageSummary:
    rows = [UsageRow.model_validate(total, from_attributes=True) for total in totals]
    return UsageSummary(since=query.since, until=query.until, totals=rows)


@describe(
    "The organization's ingestion usage",
    description=(
        "The key's organization's usage events (documents ingested: chunks written, tokens, "
        "chunks embedded, unchanged re-ingestions) totalled per event kind and knowledge base "
        "over [since, until); without bounds, every event kept."
    ),
    query=UsageQuery,
    responses={200: ("Totals per event kind and knowledge base.", UsageSummary), **AUTH},
)
def get_usage() -> ResponseReturnValue:
    query = parse_fields(UsageQuery, query_args())
    with request_session() as session:
        totals = store.usage_summary(
            session,
            organization_id=current_organization_id(),
            since=query.since,
            until=query.until,
        )
    return answer(summary_of(totals, query))
