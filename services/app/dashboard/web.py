"""The dashboard's blueprint and what every page shares: drawing a page or a problem, the
sign-in gate and CSRF check before each request, the security headers after each response,
and the answers to unreachable stores, unknown paths and wrong methods.

Every response under ``/dashboard`` carries:

===========================  ===============================================================
header                       value and why
===========================  ===============================================================
Content-Security-Policy      :data:`CSP`: scripts, styles, fetches and form posts from this
                             origin only, no plugins, no ``<base>``, and
                             ``frame-ancestors 'none'`` (no page may frame the dashboard, so
                             a same-site frame cannot click its buttons)
X-Frame-Options              ``DENY`` (the same, for browsers without CSP level 2)
X-Content-Type-Options       ``nosniff``
Referrer-Policy              ``no-referrer`` (job ids and filters stay out of other sites'
                             logs)
Cache-Control                ``no-store`` (a shared or back-button cache never shows a page
                             to the next person at the machine)
===========================  ===============================================================
"""

from __future__ import annotations

import logging
import time
from typing import Any, cast

from flask import Blueprint, Response, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from sqlalchemy.exc import OperationalError

from services.apikit.auth_throttle import count_failure, throttled
from services.apikit.context import current_platform
from services.app.bootstrap import Platform
from services.app.dashboard import auth, banner
from services.app.internal_token import api_token
from shared.errors import SpeedtierError
from tiers.redis_retry import REDIS_DOWN

log = logging.getLogger(__name__)

blueprint = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    template_folder="templates",
    static_folder="static",
)
PUBLIC_ENDPOINTS = {"dashboard.login", "dashboard.static"}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def platform() -> Platform:
    return cast(Platform, current_platform())


def token() -> str | None:
    return api_token(platform().settings)


def operator() -> auth.Operator:
    """The signed-in operator of this request (set by :func:`require_operator`)."""
    return cast(auth.Operator, g.operator)


def page(template: str, status: int = 200, **context: Any) -> ResponseReturnValue:
    who: auth.Operator | None = g.get("operator")
    csrf = who.csrf_token(token()) if who else ""
    done = banner.read(token(), request.args.get("done", ""))
    html = render_template(
        f"dashboard/{template}",
        operator=who,
        csrf_token=csrf,
        now=time.time(),
        done=done,
        **context,
    )
    return html, status


def problem(status: int, title: str, detail: str) -> ResponseReturnValue:
    return page("problem.html", status, title=title, detail=detail)


def done_url(endpoint: str, message: str, **values: Any) -> str:
    """``endpoint``'s URL with ``message`` as its banner, signed so no one else can write it."""
    return url_for(endpoint, done=banner.sign(token(), message), **values)


@blueprint.before_request
def require_operator() -> ResponseReturnValue | None:
    if request.endpoint in PUBLIC_ENDPOINTS:
        return None
    presented = token() is not None and auth.presents_credential(request)
    if presented and (refused := throttled()) is not None:
        return refused
    who = auth.operator_of(request, token(), platform())
    if who is None:
        if presented:
            count_failure()
        if request.method == "GET":
            return redirect(url_for("dashboard.login", next=request.full_path.rstrip("?")))
        return problem(401, "Not signed in", "Sign in at /dashboard/login first.")
    g.operator = who
    if request.method == "POST" and not auth.csrf_ok(who, token()):
        return problem(403, "Form expired", "The form's CSRF token did not match; reload it.")
    return None


@blueprint.after_request
def security_headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    return response


class PageProblem(SpeedtierError):
    """A request the dashboard answers with an error page (bad input, unknown name)."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail


@blueprint.errorhandler(PageProblem)
def page_problem(exc: PageProblem) -> ResponseReturnValue:
    return problem(exc.status, exc.title, exc.detail)


def redis_down(exc: Exception) -> ResponseReturnValue:
    log.warning("dashboard: redis unreachable (%s)", exc)
    return problem(503, "Redis is unreachable", "The queues cannot be read; retry shortly.")


for _down in REDIS_DOWN:
    blueprint.register_error_handler(_down, redis_down)


@blueprint.errorhandler(OperationalError)
def database_down(exc: Exception) -> ResponseReturnValue:
    log.warning("dashboard: postgresql unreachable (%s)", exc)
    return problem(503, "PostgreSQL is unreachable", "Switches and audit cannot be read.")


@blueprint.errorhandler(404)
def not_found(_exc: Exception) -> ResponseReturnValue:
    return problem(404, "No such page", f"Nothing at {request.path}.")


@blueprint.route("/<path:_unknown>", methods=["GET", "POST"])
def unknown_page(_unknown: str) -> ResponseReturnValue:
    """Any other path under /dashboard: a page that says so (not the API's JSON 404)."""
    return problem(404, "No such page", f"Nothing at {request.path}.")


@blueprint.errorhandler(405)
def wrong_method(_exc: Exception) -> ResponseReturnValue:
    return problem(405, "Method not allowed", f"{request.method} {request.path} is not served.")
