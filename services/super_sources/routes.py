"""``POST /webhooks/<source>/<path>``: the providers' public door (the signature is the
authentication, so it lives outside ``/internal`` and its bearer token)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel

from services.apikit.context import current_platform
from services.apikit.openapi import describe
from services.apikit.schemas import ErrorBody
from services.super_sources.context import SuperContext
from services.super_sources.webhooks import receive


class WebhookReceipt(BaseModel):
    """200 ``duplicate`` (this delivery id was received before) or 202 ``accepted``."""

    status: str
    delivery_id: str | None = None
    job_id: str | None = None
    queue: str | None = None


def blueprint(ctx: SuperContext) -> Blueprint:
    webhooks = Blueprint("super_webhooks", __name__)

    @webhooks.post("/webhooks/<source>/<path>")
    @describe(
        "A provider's webhook delivery (GitHub, Linear, GitLab)",
        description="The provider's signature is the authentication (no bearer token); "
        "`?connection=<id>` names the connection, else the payload's root does.",
        responses={
            200: ("a delivery id already received: nothing enqueued", WebhookReceipt),
            202: ("accepted: one webhook job on the source's tier", WebhookReceipt),
            400: ("a body the connector cannot read, or a bad `connection`", ErrorBody),
            401: ("a signature that does not verify, or a stale timestamp", ErrorBody),
            404: ("unknown source, path or connection", ErrorBody),
        },
    )
    def deliver(source: str, path: str) -> tuple[Response, int]:
        platform = current_platform()
        answer = receive(
            ctx,
            platform.sessions,
            platform.router,
            source=source,
            path=path,
            headers=dict(request.headers),
            body=request.get_data(cache=False),
            connection_param=request.args.get("connection"),
        )
        return jsonify(answer.body), answer.status

    return webhooks
