"""The weak settings a production or staging deployment will not start with.

==========================================  ============================================
refused                                     where
==========================================  ============================================
``INTERNAL_API_TOKEN`` shorter than 32      production and staging (its absence is the
characters or under ~96 bits of entropy     API's own refusal: workers do not need it)
no ``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY``  production and staging
``SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS``  every environment, unless
without its acknowledgement                 ``..._PRIVATE_NETWORKS_ACKNOWLEDGED=true``
==========================================  ============================================

Apart from :mod:`shared.config` so the settings model stays one concern; :func:`load_settings
<shared.config.load_settings>` applies it, and bootstrap again for settings built by hand.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.secret_strength import GENERATE, weakness

if TYPE_CHECKING:
    from shared.config import Settings

GENERATE_KEY = (
    "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
)


def refusals(settings: Settings) -> list[str]:
    """The refused settings of the table above, one line each naming its variable (the
    first is what ``load_settings`` reports)."""
    found: list[str] = []
    if settings.is_production_like:
        secret = settings.internal_api_token
        token = secret.get_secret_value().strip() if secret else ""
        weak = weakness(token) if token else None  # unset: the API's own refusal
        if weak is not None:
            found.append(f"INTERNAL_API_TOKEN is too weak ({weak}); generate one with {GENERATE}")
        if settings.connector_credentials_key is None:
            found.append(
                "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY is not set; stored credentials are "
                f"encrypted with it (generate one with {GENERATE_KEY})"
            )
    if settings.crawl_allow_private_networks and not settings.crawl_private_networks_acknowledged:
        found.append(
            "SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true turns the SSRF guard off and needs "
            "SPEEDTIER_CRAWL_PRIVATE_NETWORKS_ACKNOWLEDGED=true as well"
        )
    return found
