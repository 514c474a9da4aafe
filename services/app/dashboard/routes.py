"""The dashboard's pages over the queues, organizations, jobs, windows, switches, schedule,
claims, ledger and audit: thin views over ``snapshot``, ``prediction``, ``views_model`` and
``actions``. The blueprint and what every page shares are in ``web``."""

from __future__ import annotations

from collections.abc import Callable

from flask import redirect, request, url_for
from flask.typing import ResponseReturnValue

from services.app.bootstrap import Platform
from services.app.dashboard import actions, busy, serving
from services.app.dashboard import ledger as delivery_ledger
from services.app.dashboard.groups_view import org_rows
from services.app.dashboard.prediction import RATE_MINUTES
from services.app.dashboard.snapshot import take_snapshot
from services.app.dashboard.views_model import job_window, tick_rows, window_uses
from services.app.dashboard.web import (
    PageProblem,
    blueprint,
    done_url,
    operator,
    page,
    problem,
)
from services.app.dashboard.web import platform as _platform
from services.rails import delivery_claims

REFUSALS = {
    "not_failed": "it is not failed any more (re-enqueued, retried, or its record expired)",
    "changed": "it failed again since the page was drawn; look again",
    "gone": "its dead-lettered message is gone (discarded, or past Dramatiq's 7 days)",
    "not_live": "it is not queued or running any more (it finished meanwhile)",
    "no_job": "there is no such job (never enqueued, or its record expired)",
    "already": "its cancel was already asked for",
}


# -- queues and organizations ----------------------------------------------------------------


def _queues(template: str, partial: bool) -> ResponseReturnValue:
    platform = _platform()
    snapshot = take_snapshot(platform)
    return page(template, snapshot=snapshot, service=serving.service(platform), partial=partial)


@blueprint.get("/")
def home() -> ResponseReturnValue:
    return _queues("queues.html", partial=False)


@blueprint.get("/partials/queues")
def queues_partial() -> ResponseReturnValue:
    return _queues("_queues.html", partial=True)


@blueprint.get("/orgs")
def orgs() -> ResponseReturnValue:
    return page("orgs.html", rows=org_rows(_platform()), rate_minutes=RATE_MINUTES, partial=False)


@blueprint.get("/partials/orgs")
def orgs_partial() -> ResponseReturnValue:
    return page("_orgs.html", rows=org_rows(_platform()), partial=True)


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
    worker = busy.worker_of(platform, job_id) if record.get("state") == "active" else ""
    return page("job.html", job_id=job_id, record=record, ttl=ttl, window=window, worker=worker)


def _job_action(
    run: Callable[[Platform, str, str], str], job_id: str, done: str
) -> ResponseReturnValue:
    outcome = run(_platform(), operator().name, job_id)
    if outcome in REFUSALS:
        return problem(409, f"{job_id} was not {done}", f"{job_id}: {REFUSALS[outcome]}.")
    return redirect(done_url("dashboard.job", f"{done}: {outcome}", job_id=job_id))


@blueprint.post("/jobs/<path:job_id>/retry")
def retry(job_id: str) -> ResponseReturnValue:
    return _job_action(actions.retry_job, job_id, "retried")


@blueprint.post("/jobs/<path:job_id>/discard")
def discard(job_id: str) -> ResponseReturnValue:
    return _job_action(actions.discard_job, job_id, "discarded")


@blueprint.post("/jobs/<path:job_id>/cancel")
def cancel(job_id: str) -> ResponseReturnValue:
    return _job_action(actions.cancel_job, job_id, "cancel")


# -- windows, switches, schedule, audit ------------------------------------------------------


@blueprint.get("/windows")
def windows() -> ResponseReturnValue:
    return page("windows.html", uses=window_uses(_platform()))


@blueprint.get("/switches")
def switches() -> ResponseReturnValue:
    platform = _platform()
    by_flag = platform.registry.pause_flags()
    paused = platform.flags.states(by_flag)
    rows = [
        {
            "flag": flag,
            "families": names,
            "paused": paused[flag],
            "forced": platform.flags.overrides.get(flag),
        }
        for flag, names in by_flag.items()
    ]
    return page("switches.html", rows=rows)


def _switch_request(flag: str) -> tuple[list[str], bool]:
    """The families ``flag`` pauses and whether the request asks to pause them.

    Raises:
      PageProblem: an unknown switch (404) or a ``to`` other than on/off (400).
    """
    known = _platform().registry.pause_flags()
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
    actions.set_switch(_platform(), operator().name, flag, pause)
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
    outcome = actions.resolve_claim(_platform(), operator().name, key, how == "delivered")
    if outcome == "not_unresolved":
        detail = f"No unresolved claim {key!r}: it was resolved or released meanwhile."
        raise PageProblem(409, "Nothing to resolve", detail)
    return redirect(done_url("dashboard.claims", f"{key}: {outcome}"))


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
