"""The service context a request is served with, kept on the Flask app."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from flask import Flask, current_app

if TYPE_CHECKING:
    from router.context import ServiceContext

_KEY = "speedtier.platform"


def attach_platform(app: Flask, platform: ServiceContext) -> None:
    app.extensions[_KEY] = platform


def current_platform() -> ServiceContext:
    """The context of the app serving the current request."""
    return cast("ServiceContext", current_app.extensions[_KEY])
