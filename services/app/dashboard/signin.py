"""Sign-in and sign-out (``auth`` holds the session and its revocation; failed sign-ins count
against the source address like every failed authentication: ``services.apikit.auth_throttle``)."""

from __future__ import annotations

from typing import cast

from flask import Response, make_response, redirect, request, url_for
from flask.typing import ResponseReturnValue

from services.apikit.auth import token_matches
from services.apikit.auth_throttle import count_failure, throttled
from services.app.dashboard import auth
from services.app.dashboard.web import blueprint, operator, page, platform, token


def _safe_next(target: str | None) -> str:
    return target if target and target.startswith("/dashboard") else url_for("dashboard.home")


@blueprint.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    secret = token()
    target = _safe_next(request.values.get("next"))
    if secret is None:
        return redirect(target)
    if request.method == "GET":
        return page("login.html", next=target, error="")
    if (throttle := throttled()) is not None:
        wait = throttle.headers["Retry-After"]
        error = f"Too many failed sign-ins from this address; try again in {wait} s."
        refused = make_response(page("login.html", 429, next=target, error=error))
        refused.headers["Retry-After"] = wait
        return refused
    name = auth.clean_name(request.form.get("name", ""))
    if not name or not token_matches(request.form.get("token", ""), secret):
        if name:
            count_failure()
        error = "Give your name." if not name else "That token is not this deployment's."
        return page("login.html", 401, next=target, error=error)
    response = cast(Response, redirect(target))
    secure = request.is_secure or not platform().settings.is_development
    auth.set_session_cookie(response, auth.issue_session(secret, name), secure=secure)
    return response


@blueprint.post("/logout")
def logout() -> ResponseReturnValue:
    who = operator()
    if who.via == "cookie":
        auth.revoke(platform(), who.session)
    response = cast(Response, redirect(url_for("dashboard.login")))
    response.delete_cookie(auth.COOKIE, path="/dashboard")
    return response
