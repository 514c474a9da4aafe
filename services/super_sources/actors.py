"""Thin actor bodies of the three families: each calls its unit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Router
from services.connectors.nodes import NodeRef, WebhookEvent
from services.super_sources.context import SuperContext
from services.super_sources.imports import import_root
from services.super_sources.node_index import index_node
from services.super_sources.webhooks import handle_delivery


@dataclass(frozen=True)
class SuperSourceActors:
    """The three actor bodies, as methods bound to their dependencies."""

    sessions: sessionmaker[Session]
    router: Router
    ctx: SuperContext

    def super_import(
        self,
        organization_id: int,
        connection_id: int,
        root_node_type: str,
        root_node_id: str,
        first_run: bool = False,
        **_routing: Any,
    ) -> None:
        import_root(
            self.sessions,
            self.router,
            self.ctx,
            organization_id=organization_id,
            connection_id=connection_id,
            root=NodeRef(root_node_type, root_node_id),
            first_run=first_run,
        )

    def super_index(
        self,
        organization_id: int,
        connection_id: int,
        node_type: str,
        node_id: str,
        listed_date: str | None = None,
        webhook: bool = False,
        **_routing: Any,
    ) -> None:
        index_node(
            self.sessions,
            self.ctx,
            organization_id=organization_id,
            connection_id=connection_id,
            ref=NodeRef(node_type, node_id),
            listed_date=datetime.fromisoformat(listed_date) if listed_date else None,
            webhook=webhook,
        )

    def super_webhook(
        self,
        organization_id: int,
        source: str,
        path: str,
        connection_id: int,
        delivery_id: str,
        refs: list[list[str]],
        removed: list[list[str]],
        root: list[str] | None = None,
        kind: str = "",
        **_received: Any,
    ) -> None:
        event = WebhookEvent(
            delivery_id=delivery_id,
            refs=[NodeRef(*ref) for ref in refs],
            removed=[NodeRef(*ref) for ref in removed],
            root=NodeRef(*root) if root else None,
            kind=kind,
        )
        handle_delivery(
            self.sessions,
            self.router,
            self.ctx,
            organization_id=organization_id,
            source=source,
            path=path,
            connection_id=connection_id,
            event=event,
        )
