"""Shadow runs as every product reports them: one comparison of a native path with Rails'.

A product that runs a native path read-only beside Rails' (the Scientist pattern) registers a
:data:`ParitySource` with ``ServiceContext.add_parity``; the dashboard's Parity page reads
every registered source and imports no product. Each product keeps its runs its own way
(a job record, a Redis list) and translates them into :class:`ParityRun`:

| field | meaning |
| --- | --- |
| ``product`` | the registering product (``reports``, ``maintenance``, ``uploads``) |
| ``organization_id`` | the organization measured; None for a run over the region |
| ``ran_at`` | when the comparison was made (UTC) |
| ``matched`` | the native path agreed with Rails' in every compared row, field and count |
| ``subject`` | what was compared (``report 2026-01-04``, ``step 7``, ``upload 12``) |
| ``summary`` | the counts on both sides, one line |
| ``differences`` | each divergence (a row missing or extra, a field, an identity, a count) |
| ``job_id`` | the job the run happened in, when known |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class ParityRun:
    """One shadow run's comparison (the module docstring's table)."""

    product: str
    organization_id: int | None
    ran_at: datetime
    matched: bool
    subject: str
    summary: str
    differences: tuple[str, ...] = ()
    job_id: str | None = None


#: A product's shadow runs since a moment (UTC), oldest first.
ParitySource = Callable[[datetime], list[ParityRun]]


@dataclass(frozen=True)
class KeptShadowRun:
    """One shadow run as a product keeps it: a JSON record holding at least ``ran_at`` (ISO
    8601) and ``matched``; each product adds what it compared."""

    record: dict[str, Any]

    @property
    def ran_at(self) -> datetime:
        return datetime.fromisoformat(str(self.record["ran_at"]))

    @property
    def matched(self) -> bool:
        return bool(self.record.get("matched"))
