"""``POST /webhooks/<source>/<path>``: the providers' public door (the signature is the
authentication, so it lives outside ``/internal`` and its bearer token)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from services.apikit.context import current_platform
from services.super_sources.context import SuperContext
from services.super_sources.webhooks import receive


def blueprint(ctx: SuperContext) -> Blueprint:
    webhooks = Blueprint("super_webhooks", __name__)

    @webhooks.post("/webhooks/<source>/<path>")
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
