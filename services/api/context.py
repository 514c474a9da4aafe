"""The platform a request is served with, kept on the Flask app."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from flask import Flask, current_app

if TYPE_CHECKING:
    from services.bootstrap import Platform

_KEY = "speedtier.platform"


def attach_platform(app: Flask, platform: Platform) -> None:
    app.extensions[_KEY] = platform


def current_platform() -> Platform:
    """The platform of the app serving the current request."""
    return cast("Platform", current_app.extensions[_KEY])
