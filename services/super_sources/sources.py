"""The sources this deployment indexes: one :class:`SourceEntry` each.

Adding a source is one entry here plus its connector module (``services/connectors/``);
its tier is the tier table's (``tiers.table``: a source missing there runs in the slow
tier). No queue, worker or chart changes.
"""

from __future__ import annotations

from services.super_sources.registry import SourceEntry, SourceRegistry, WebhookSpec


def default_registry() -> SourceRegistry:
    from services.connectors import (
        asana,
        attio,
        git_repository,
        github,
        gitlab,
        google_drive,
        hubspot,
        linear,
        notion,
        notion_nodes,
        sharepoint,
        website,
    )

    return SourceRegistry.of(
        [
            SourceEntry(
                connector=github.SOURCE,
                default_base_url=github.DEFAULT_BASE_URL,
                # of 5,000 calls an hour per token: 3% (75 webhook fetches of an issue and its
                # comments, past the calls 24 worker threads may have in flight)
                webhook_reserve=150,
                webhooks=(
                    WebhookSpec(
                        path="events",
                        scheme="X-Hub-Signature-256: HMAC-SHA256 of the body",
                        verify=github.verify,
                        parse=github.parse,
                    ),
                ),
            ),
            # no webhook_reserve: a reserve applies to each budget a response reports, and
            # Linear's two are in different units (requests, complexity points); its
            # webhooks met the 2 s target without one
            SourceEntry(
                connector=linear.SOURCE,
                default_base_url=linear.DEFAULT_BASE_URL,
                webhooks=(
                    WebhookSpec(
                        path="events",
                        scheme="Linear-Signature: HMAC-SHA256 of the body; webhookTimestamp "
                        "within 60 s",
                        verify=linear.verify,
                        parse=linear.parse,
                    ),
                ),
            ),
            SourceEntry(
                connector=gitlab.SOURCE,
                default_base_url=gitlab.DEFAULT_BASE_URL,
                # of gitlab.com's 2,000 authenticated calls a minute: 5%
                webhook_reserve=100,
                webhooks=(
                    WebhookSpec(
                        path="events",
                        scheme="X-Gitlab-Token: the secret itself",
                        verify=gitlab.verify,
                        parse=gitlab.parse,
                    ),
                ),
            ),
            # roots are clone URLs (settings.repositories); no webhooks (an import re-drive
            # walks only what changed since the last indexed commit)
            SourceEntry(connector=git_repository.SOURCE),
            # the slow tier's sources, through the knowledge-sync clients; no webhooks
            SourceEntry(connector=notion_nodes.SOURCE, default_base_url=notion.DEFAULT_BASE_URL),
            SourceEntry(connector=website.SOURCE),
            # no webhooks (Drive push channels and Graph subscriptions expire and
            # need a renewal loop); an import re-drive walks the changes API / the deltaLink
            SourceEntry(
                connector=google_drive.SOURCE, default_base_url=google_drive.DEFAULT_BASE_URL
            ),
            SourceEntry(connector=sharepoint.SOURCE, default_base_url=sharepoint.DEFAULT_BASE_URL),
            SourceEntry(connector=asana.SOURCE, default_base_url=asana.DEFAULT_BASE_URL),
            SourceEntry(connector=hubspot.SOURCE, default_base_url=hubspot.DEFAULT_BASE_URL),
            SourceEntry(connector=attio.SOURCE, default_base_url=attio.DEFAULT_BASE_URL),
        ]
    )
