"""The internal API: a Flask app the main application calls to hand work to the platform.

``create_app`` assembles it: the platform's own blueprints (health, ``/internal/jobs``, the
OpenAPI document) plus every blueprint a service registered with
``platform.add_blueprint``. Nothing connects at import time.

Authentication: every ``/internal`` route needs ``Authorization: Bearer
<INTERNAL_API_TOKEN>``. Outside development and test the app refuses to start without the
token (and ``shared.config`` refuses a weak one there). In development or test without a token the
``/internal`` routes are open and a warning says so at start-up; with a token set they
require it in every environment. An unset ``SPEEDTIER_ENV`` means production. Failed
authentication is rate-limited per source address (``services.apikit.auth_throttle``). The
token rule is :mod:`services.app.internal_token`, which the dashboard's sign-in shares.
"""

from __future__ import annotations

from flask import Flask
from werkzeug.middleware.proxy_fix import ProxyFix

from services.apikit.auth import install_bearer_auth
from services.apikit.auth_throttle import AuthThrottle, install_auth_throttle
from services.apikit.context import attach_platform
from services.apikit.errors import register_error_handlers
from services.apikit.request import ApiRequest
from services.apikit.validation import IdConverter
from services.app.api import jobs_routes, metrics_route, openapi_document, probes
from services.app.bootstrap import Platform, bootstrap
from services.app.dashboard import blueprint as dashboard
from services.app.internal_token import api_token, warn_if_open
from shared import tracing
from shared.config import Settings, load_settings, parse_rate
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows

PLATFORM_BLUEPRINTS = (
    probes.blueprint,
    metrics_route.blueprint,
    jobs_routes.blueprint,
    openapi_document.blueprint,
)


def auth_throttle(platform: Platform) -> AuthThrottle:
    """Failed authentications per source address (``SPEEDTIER_AUTH_FAILURE_RATE``), counted
    on the control Redis."""
    settings = platform.settings
    windows = RateWindows(platform.broker.client, settings.redis_namespace)
    return AuthThrottle(windows, WindowRule(*parse_rate(settings.auth_failure_rate)))


def create_app(
    platform: Platform | None = None, settings: Settings | None = None, *, warn_open: bool = True
) -> Flask:
    """Build the internal API.

    Parameters:
      platform: the assembled platform; built with :func:`services.app.bootstrap.bootstrap`
        from ``settings`` when not given.
      settings: used when ``platform`` is None; defaults to the environment.
      warn_open: warn when ``/internal`` is open; ``speedtier api`` warns once itself rather
        than once per gunicorn worker.

    Raises:
      MissingToken: outside development and test without ``INTERNAL_API_TOKEN``
        (:mod:`services.app.internal_token`).
    """
    settings = platform.settings if platform is not None else settings or load_settings()
    token = api_token(settings)  # before bootstrap: refuse to start before connecting
    if platform is None:
        platform = bootstrap(settings, component="api")
    if warn_open:
        warn_if_open(settings)

    app = Flask(__name__, static_folder=None)
    app.request_class = ApiRequest
    app.url_map.converters["id"] = IdConverter
    app.url_map.converters["job_id"] = jobs_routes.JobIdConverter
    app.config["MAX_CONTENT_LENGTH"] = settings.api_max_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    if settings.trusted_proxy_hops:  # the source address failed authentication is counted by
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=settings.trusted_proxy_hops)  # type: ignore[method-assign]
    attach_platform(app, platform)
    install_auth_throttle(app, auth_throttle(platform))
    install_bearer_auth(app, token)
    register_error_handlers(app)
    for blueprint in (*PLATFORM_BLUEPRINTS, *platform.blueprints()):
        app.register_blueprint(blueprint)
    app.register_blueprint(dashboard)
    if tracing.is_on():
        # A server span per request, continuing the caller's traceparent header.
        from opentelemetry.instrumentation.flask import FlaskInstrumentor

        FlaskInstrumentor().instrument_app(app)  # type: ignore[no-untyped-call]
    return app
