"""The Failed page: dead letters by organization, family, queue and error class, filtered,
grouped and paged, with retry, discard and their bulk forms (``failures``, ``actions``)."""

from __future__ import annotations

from flask import redirect, request
from flask.typing import ResponseReturnValue

from services.app.dashboard import actions, failures
from services.app.dashboard.web import PageProblem, blueprint, done_url, operator, page, platform


@blueprint.get("/failed")
def failed() -> ResponseReturnValue:
    every = failures.all_failures(platform())
    filters = failures.clean_filters(request.args)
    chosen = failures.matching(every, filters)
    number = request.args.get("page", "1")
    shown = failures.page_of(chosen, int(number) if number.isdigit() else 1)
    options = {
        "org": sorted({f.org for f in every if f.org}, key=lambda o: (len(o), o)),
        "family": sorted({f.family for f in every}),
        "queue": sorted({f.queue for f in every}),
        "error": sorted({f.error_class for f in every}),
    }
    return page(
        "failed.html",
        page_of=shown,
        filters=filters,
        options=options,
        groups=failures.by_error_class(chosen),
        actionable=sum(1 for f in chosen if f.actionable),
        since_hours=failures.SINCE_HOURS,
        capped=len(every) >= failures.MAX_LETTERS,
    )


@blueprint.post("/failed/bulk")
def failed_bulk() -> ResponseReturnValue:
    """Retry or discard every actionable failure the posted filter chooses, if there are
    still as many as the confirmation stated (otherwise nothing is done: look again)."""
    action = request.form.get("action", "")
    if action not in actions.BULK_DONE:
        raise PageProblem(400, "Say retry or discard", "A bulk action is retry or discard.")
    filters = failures.clean_filters(request.form)
    chosen = [
        f for f in failures.matching(failures.all_failures(platform()), filters) if f.actionable
    ]
    expected = request.form.get("expected", "")
    if expected != str(len(chosen)):
        detail = (
            f"You confirmed {expected or 'no'} job(s), but the filter now chooses {len(chosen)} "
            "(jobs failed, or were retried, meanwhile). Nothing was done; look again."
        )
        raise PageProblem(409, "The failed set changed", detail)
    outcomes = actions.bulk(
        platform(), operator().name, action, [f.job_id for f in chosen], failures.describe(filters)
    )
    done = sum(outcomes[o] for o in actions.BULK_DONE[action])
    verb = "retried" if action == "retry" else "discarded"
    message = f"{verb} {done} of {len(chosen)} failed job(s)"
    refused = len(chosen) - done
    if refused:
        message += f"; {refused} had moved on meanwhile"
    return redirect(done_url("dashboard.failed", message, **filters))
