"""The dashboard's routes: thin views over ``snapshot``, ``prediction``, ``views_model`` and
``actions``; sign-in and CSRF in ``auth``."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

from flask import Blueprint, Response, g, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from sqlalchemy.exc import OperationalError

from services.apikit.auth import token_matches
from services.apikit.auth_throttle import count_failure, throttled
from services.apikit.context import current_platform
from services.app.api import api_token
from services.app.bootstrap import Platform
from services.app.dashboard import actions, auth
from services.app.dashboard import ledger as delivery_ledger
from services.app.dashboard.prediction import RATE_MINUTES, Rates, positions, predict
from services.app.dashboard.snapshot import take_snapshot
from services.app.dashboard.views_model import job_window, tick_rows, window_uses
from services.rails import delivery_claims
from shared.errors import SpeedtierError
from tiers.dead_letters import DeadLetters
from tiers.redis_retry import REDIS_DOWN
from tiers.run_rates import recent_minutes

log = logging.getLogger(__name__)

blueprint = Blueprint(
    "dashboard",
    __name__,
    url_prefix="/dashboard",
    template_folder="templates",
    static_folder="static",
)
PUBLIC_ENDPOINTS = {"dashboard.login", "dashboard.static"}
REFUSALS = {
    "not_failed": "it is not failed any more (re-enqueued, retried, or its record expired)",
    "changed": "it failed again since the page was drawn; look again",
    "gone": "its dead-lettered message is gone (discarded, or past Dramatiq's 7 days)",
}


def _platform() -> Platform:
    return cast(Platform, current_platform())


def _token() -> str | None:
    return api_token(_platform().settings)


def page(template: str, status: int = 200, **context: Any) -> ResponseReturnValue:
    operator: auth.Operator | None = g.get("operator")
    csrf = operator.csrf_token(_token()) if operator else ""
    html = render_template(
        f"dashboard/{template}", operator=operator, csrf_token=csrf, now=time.time(), **context
    )
    return html, status


def problem(status: int, title: str, detail: str) -> ResponseReturnValue:
    return page("problem.html", status, title=title, detail=detail)


@blueprint.before_request
def require_operator() -> ResponseReturnValue | None:
    if request.endpoint in PUBLIC_ENDPOINTS:
        return None
    token = _token()
    presented = token is not None and auth.presents_credential(request)
    if presented and (refused := throttled()) is not None:
        return refused
    operator = auth.operator_of(request, token)
    if operator is None:
        if presented:
            count_failure()
        if request.method == "GET":
            return redirect(url_for("dashboard.login", next=request.full_path.rstrip("?")))
        return problem(401, "Not signed in", "Sign in at /dashboard/login first.")
    g.operator = operator
    if request.method == "POST" and not auth.csrf_ok(operator, _token()):
        return problem(403, "Form expired", "The form's CSRF token did not match; reload it.")
    return None


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


# -- sign-in ---------------------------------------------------------------------------------


def _safe_next(target: str | None) -> str:
    return target if target and target.startswith("/dashboard") else url_for("dashboard.home")


@blueprint.route("/login", methods=["GET", "POST"])
def login() -> ResponseReturnValue:
    token = _token()
    target = _safe_next(request.values.get("next"))
    if token is None:
        return redirect(target)
    if request.method == "GET":
        return page("login.html", next=target, error="")
    if (refused := throttled()) is not None:
        return refused
    name = auth.clean_name(request.form.get("name", ""))
    presented = request.form.get("token", "")
    if name and not token_matches(presented, token):
        count_failure()
    if not name or not token_matches(presented, token):
        error = "Give your name." if not name else "That token is not this deployment's."
        return page("login.html", 401, next=target, error=error)
    response = cast(Response, redirect(target))
    secure = request.is_secure or not _platform().settings.is_development
    auth.set_session_cookie(response, auth.issue_session(token, name), secure=secure)
    return response


@blueprint.post("/logout")
def logout() -> ResponseReturnValue:
    response = cast(Response, redirect(url_for("dashboard.login")))
    response.delete_cookie(auth.COOKIE, path="/dashboard")
    return response


# -- queues and organizations ----------------------------------------------------------------


@blueprint.get("/")
def home() -> ResponseReturnValue:
    return page("queues.html", snapshot=take_snapshot(_platform()), partial=False)


@blueprint.get("/partials/queues")
def queues_partial() -> ResponseReturnValue:
    return page("_queues.html", snapshot=take_snapshot(_platform()), partial=True)


def _recent_minutes(platform: Platform, now: float) -> list[tuple[int, Counter[str]]]:
    """The run rates' minutes, summed over each tier's Redis."""
    by_minute: dict[int, Counter[str]] = {}
    for broker, _tiers in platform.brokers.serving():
        ns = platform.settings.redis_namespace
        for minute, counts in recent_minutes(broker.client, ns, RATE_MINUTES, now):
            by_minute.setdefault(minute, Counter()).update(counts)
    return sorted(by_minute.items())


def _org_rows() -> list[dict[str, Any]]:
    platform = _platform()
    snapshot = take_snapshot(platform)
    ns = platform.settings.redis_namespace
    now = time.time()
    rates = Rates(_recent_minutes(platform, now), now)
    ahead: dict[str, int] = {}
    for broker, tiers in platform.brokers.serving():
        mine = [group for group in snapshot.groups if group.tier in tiers]
        ahead.update(positions(broker.client, ns, mine))
    lengths = {row.queue: row.waiting for row in snapshot.queues}
    rows = []
    busy = [g for g in snapshot.groups if g.running or g.waiting or g.parked]
    for group in sorted(busy, key=lambda g: (g.owner, g.family, g.tier)):
        prediction = predict(group, rates, ahead.get(group.key), lengths.get(group.queue, 0))
        rows.append({"group": group, "prediction": prediction})
    return rows


@blueprint.get("/orgs")
def orgs() -> ResponseReturnValue:
    return page("orgs.html", rows=_org_rows(), rate_minutes=RATE_MINUTES, partial=False)


@blueprint.get("/partials/orgs")
def orgs_partial() -> ResponseReturnValue:
    return page("_orgs.html", rows=_org_rows(), partial=True)


# -- jobs ------------------------------------------------------------------------------------


@blueprint.get("/jobs")
def job_search() -> ResponseReturnValue:
    job_id = request.args.get("id", "").strip()
    if not job_id:
        return page("job_search.html")
    if len(job_id) > 300 or not job_id.isprintable():
        return problem(400, "Not a job id", "A job id is one line of at most 300 characters.")
    return redirect(url_for("dashboard.job", job_id=job_id))


@blueprint.get("/jobs/<path:job_id>")
def job(job_id: str) -> ResponseReturnValue:
    platform = _platform()
    found = platform.brokers.find(job_id)
    if found is None:
        return page("job_missing.html", 404, job_id=job_id)
    broker, record = found
    ttl = broker.client.ttl(broker.jobs.record_key(job_id))
    window = job_window(platform, record)
    return page("job.html", job_id=job_id, record=record, ttl=ttl, window=window)


def _job_action(
    run: Callable[[Platform, str, str], str], job_id: str, done: str
) -> ResponseReturnValue:
    operator: auth.Operator = g.operator
    outcome = run(_platform(), operator.name, job_id)
    if outcome in REFUSALS:
        return problem(409, f"{job_id} was not {done}", f"{job_id}: {REFUSALS[outcome]}.")
    return redirect(url_for("dashboard.job", job_id=job_id, done=f"{done}: {outcome}"))


@blueprint.post("/jobs/<path:job_id>/retry")
def retry(job_id: str) -> ResponseReturnValue:
    return _job_action(actions.retry_job, job_id, "retried")


@blueprint.post("/jobs/<path:job_id>/discard")
def discard(job_id: str) -> ResponseReturnValue:
    return _job_action(actions.discard_job, job_id, "discarded")


@blueprint.get("/failed")
def failed() -> ResponseReturnValue:
    platform = _platform()
    queues = sorted({q for f in platform.registry for q in f.queues()})
    letters = []
    for broker, tiers in platform.brokers.serving():
        mine = [queue for queue in queues if queue.rpartition(".")[2] in tiers]
        letters += DeadLetters(broker.jobs).latest(mine, limit=100)
    letters = sorted(letters, key=lambda letter: letter.failed_at_ms, reverse=True)[:100]
    return page("failed.html", letters=letters)


# -- windows, switches, schedule, audit ------------------------------------------------------


@blueprint.get("/windows")
def windows() -> ResponseReturnValue:
    return page("windows.html", uses=window_uses(_platform()))


def _switches() -> dict[str, list[str]]:
    by_flag: dict[str, list[str]] = {}
    for family in _platform().registry:
        if family.pause_flag:
            by_flag.setdefault(family.pause_flag, []).append(family.name)
    return dict(sorted(by_flag.items()))


@blueprint.get("/switches")
def switches() -> ResponseReturnValue:
    platform = _platform()
    rows = [
        {
            "flag": flag,
            "families": names,
            "paused": platform.flags.is_enabled(flag),
            "forced": platform.flags.overrides.get(flag),
        }
        for flag, names in _switches().items()
    ]
    return page("switches.html", rows=rows)


def _switch_request(flag: str) -> tuple[list[str], bool]:
    """The families ``flag`` pauses and whether the request asks to pause them.

    Raises:
      PageProblem: an unknown switch (404) or a ``to`` other than on/off (400).
    """
    known = _switches()
    if flag not in known:
        raise PageProblem(404, "No such kill switch", f"No family is paused by {flag!r}.")
    wanted = request.values.get("to", "")
    if wanted not in ("on", "off"):
        raise PageProblem(400, "Say on or off", "The switch turns 'on' (pause) or 'off'.")
    return known[flag], wanted == "on"


@blueprint.get("/switches/<flag>")
def confirm_switch(flag: str) -> ResponseReturnValue:
    families, pause = _switch_request(flag)
    return page("switch_confirm.html", flag=flag, families=families, pause=pause)


@blueprint.post("/switches/<flag>")
def set_switch(flag: str) -> ResponseReturnValue:
    _families, pause = _switch_request(flag)
    if request.form.get("confirm") != flag:
        raise PageProblem(400, "Not confirmed", f"Type the switch's name, {flag}, to confirm.")
    operator: auth.Operator = g.operator
    actions.set_switch(_platform(), operator.name, flag, pause)
    return redirect(url_for("dashboard.switches"))


@blueprint.get("/claims")
def claims() -> ResponseReturnValue:
    rows = delivery_claims.unresolved(_platform().sessions, limit=500)
    return page("claims.html", claims=rows, lease=delivery_claims.DEFAULT_LEASE)


@blueprint.post("/claims/resolve")
def resolve_claim() -> ResponseReturnValue:
    key = request.form.get("key", "")
    how = request.form.get("how", "")
    if not key or how not in ("delivered", "release"):
        raise PageProblem(400, "Say which claim and how", "Give a key and delivered or release.")
    if "\x00" in key:  # no claim key holds one: PostgreSQL text cannot
        raise PageProblem(400, "No such claim key", "A claim key never contains NUL (U+0000).")
    operator: auth.Operator = g.operator
    outcome = actions.resolve_claim(_platform(), operator.name, key, how == "delivered")
    if outcome == "not_unresolved":
        detail = f"No unresolved claim {key!r}: it was resolved or released meanwhile."
        raise PageProblem(409, "Nothing to resolve", detail)
    return redirect(url_for("dashboard.claims", done=f"{key}: {outcome}"))


@blueprint.get("/ledger")
def ledger() -> ResponseReturnValue:
    groups, rows = delivery_ledger.in_flight(_platform().sessions)
    return page("ledger.html", groups=groups, rows=rows, grace=delivery_ledger.GRACE_SECONDS)


@blueprint.get("/schedule")
def schedule() -> ResponseReturnValue:
    return page("schedule.html", rows=tick_rows(_platform()))


@blueprint.get("/audit")
def audit() -> ResponseReturnValue:
    return page("audit.html", rows=actions.recent(_platform()))
