"""The chunks a search may rank: one organization's, optionally one knowledge base's, of
live documents, public or sharing a label with the caller's audience
(:class:`SearchScope`, whose :meth:`SearchScope.where` every retrieval statement takes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SearchScope:
    """The chunks a caller may see: one organization's (always), one base's when
    ``knowledge_base_id`` is set, of live (not deleted) documents, public or sharing a label
    with ``audience``."""

    organization_id: int
    knowledge_base_id: int | None = None
    audience: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.organization_id, bool) or not isinstance(self.organization_id, int):
            raise TypeError(f"organization_id must be an int, got {self.organization_id!r}")
        if isinstance(self.audience, str):
            raise TypeError("audience must be a sequence of labels, not a string")

    def where(self) -> str:
        """The visibility criteria on ``api2.kb_chunks c``.

        A chunk's document is not deleted: asked as "no deleted document of this
        organization is the chunk's" (an anti-join against the tenant's deleted documents,
        usually none) rather than "a live one is" (a join against all its documents, which
        the exact scan probed for every chunk: 0.6 to 1.5 ms of server CPU in a search of
        10,000 chunks, same answers). The two are the same question because every chunk
        has its document (the foreign key on ``(organization_id, document_id)``)."""
        criteria = ["c.organization_id = :organization_id"]
        if self.knowledge_base_id is not None:
            criteria.append("c.knowledge_base_id = :knowledge_base_id")
        criteria += [
            "(c.audience = '{}'::text[] OR c.audience && CAST(:audience AS text[]))",
            "NOT EXISTS (SELECT 1 FROM api2.kb_documents d WHERE d.organization_id = "
            ":organization_id AND d.id = c.document_id AND d.deleted_at IS NOT NULL)",
        ]
        return " AND ".join(criteria)

    def params(self) -> dict[str, Any]:
        return {
            "organization_id": self.organization_id,
            "knowledge_base_id": self.knowledge_base_id,
            "audience": list(self.audience),
        }
