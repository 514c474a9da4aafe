"""One page per organization, ``/dashboard/orgs/<org>``: its groups with their predicted
next start, its running, parked, delayed and failed jobs, what its delayed jobs wait for and
its runs lately, with cancel, retry, discard and the bulk forms scoped to it."""

from __future__ import annotations

from flask.typing import ResponseReturnValue
from sqlalchemy import select

from services.app.dashboard import busy, failures, tenant
from services.app.dashboard.groups_view import org_rows
from services.app.dashboard.prediction import RATE_MINUTES
from services.app.dashboard.web import PageProblem, blueprint, page, platform
from shared.db.engine import session_scope
from shared.db.models import Organization


@blueprint.get("/orgs/<org>")
def tenant_page(org: str) -> ResponseReturnValue:
    if not org.isdigit() or len(org) > 19:
        raise PageProblem(400, "Not an organization id", "An organization id is a number.")
    plat = platform()
    groups = org_rows(plat, owner=org)
    delayed = tenant.delayed_jobs(plat, org)
    failed = failures.matching(failures.all_failures(plat), {"org": org})
    with session_scope(plat.sessions) as session:
        name = session.scalar(select(Organization.name).where(Organization.id == int(org)))
    return page(
        "tenant.html",
        org=org,
        name=name,
        groups=groups,
        running=busy.running_jobs(plat, org),
        parked=tenant.parked_jobs(plat, [row["group"].key for row in groups]),
        delayed=delayed[: tenant.LIST_LIMIT],
        delayed_total=len(delayed),
        waits=tenant.waits(delayed),
        failed=failed[: failures.PAGE_SIZE],
        failed_total=len(failed),
        failed_groups=failures.by_error_class(failed),
        actionable=sum(1 for f in failed if f.actionable),
        runs=sum(row["runs"] for row in groups),
        rate_minutes=RATE_MINUTES,
    )
