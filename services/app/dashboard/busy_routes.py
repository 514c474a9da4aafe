"""The Busy page: the jobs running now (or holding one group's slots, ``?group=``), each
with its worker and time running, and a cancel button (``busy``, ``actions``)."""

from __future__ import annotations

from flask import request
from flask.typing import ResponseReturnValue

from services.app.dashboard import busy
from services.app.dashboard.web import PageProblem, blueprint, page, platform


@blueprint.get("/busy")
def busy_page() -> ResponseReturnValue:
    group = request.args.get("group", "").strip()
    if group:
        if "|" not in group or len(group) > 300 or not group.isprintable():
            raise PageProblem(400, "Not a group", "A group is <queue>|<organization>.")
        jobs = busy.group_holders(platform(), group)
    else:
        jobs = busy.running_jobs(platform())
    return page("busy.html", jobs=jobs, group=group)
