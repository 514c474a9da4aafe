"""The combined email's attachments: one CSV per organization that produced rows."""

from __future__ import annotations

import csv
import io
from datetime import date
from typing import Any

from services.reports.store import ReportRow

HEADER = ("agent_id", "agent_name", "agent_email", "evaluations", "average_score", "lowest_score")


def report_csv(rows: list[ReportRow]) -> str:
    """One organization's rows as CSV text (header first, one line per agent)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(HEADER)
    for row in rows:
        writer.writerow(
            (
                row.agent_id,
                row.agent_name or "",
                row.agent_email or "",
                row.evaluations,
                "" if row.average_score is None else f"{row.average_score:.1f}",
                "" if row.lowest_score is None else f"{row.lowest_score:.1f}",
            )
        )
    return buffer.getvalue()


def combined_attachments(
    collected: dict[int, tuple[date, list[ReportRow]]],
) -> list[dict[str, Any]]:
    """The attachments of the combined email, by organization id."""
    return [
        {
            "organization_id": org,
            "date": day.isoformat(),
            "filename": f"daily-agent-evaluations-{org}-{day.isoformat()}.csv",
            "content_type": "text/csv",
            "content": report_csv(rows),
        }
        for org, (day, rows) in sorted(collected.items())
        if rows
    ]
