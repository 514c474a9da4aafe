"""The internal API's bearer token, which the API's routes and the dashboard's sign-in both
check: required outside development and test, optional (and the routes open) inside them.
"""

from __future__ import annotations

import logging

from shared.config import Settings
from shared.errors import SpeedtierError

log = logging.getLogger(__name__)


class MissingToken(SpeedtierError, RuntimeError):
    """INTERNAL_API_TOKEN is required outside development and test."""


def api_token(settings: Settings) -> str | None:
    """The bearer token the app requires, or None when it may run open (development, test).

    Raises:
      MissingToken: outside development and test without ``INTERNAL_API_TOKEN``.
    """
    secret = settings.internal_api_token
    token = secret.get_secret_value().strip() if secret is not None else ""
    if token:
        return token
    if not settings.is_development:
        raise MissingToken(
            f"INTERNAL_API_TOKEN is not set; the internal API will not start in "
            f"{settings.environment} without it"
        )
    return None


def warn_if_open(settings: Settings) -> None:
    """Say that ``/internal`` is open when no token is set (development and test only)."""
    if api_token(settings) is None:
        log.warning(
            "INTERNAL_API_TOKEN is not set: /internal routes are OPEN to anyone who can reach "
            "this port (allowed only because SPEEDTIER_ENV=%s)",
            settings.environment,
        )
