"""The operator's dashboard, ``/dashboard``: server-rendered pages over the live platform.

=================================  ===========================================================
page                               what it shows / does
=================================  ===========================================================
``/dashboard/``                    waiting, delayed, parked, active and failed per tier and
                                   family, refreshed every few seconds
``/dashboard/orgs``                per organization and family: backlog, running versus cap,
                                   parked, predicted start of its next job (``prediction``,
                                   ``serving``); a link to the jobs holding a full group
``/dashboard/orgs/<org>``          one organization: groups, running, parked, delayed (and
                                   why), failed, runs lately, actions scoped to it
``/dashboard/busy``                running jobs with worker, start, time running, attempt,
                                   cancel (``?group=``: the jobs holding one group's slots)
``/dashboard/jobs?id=``            a job's record, with retry, discard and cancel
``/dashboard/failed``              failed jobs by organization, family, queue, error class;
                                   filters, counts per error class, pages, bulk retry and
                                   discard of the filtered set (``failures``)
``/dashboard/windows``             provider windows: use now and over the last hour
``/dashboard/switches``            kill switches (Flipper's tables), raise/lower after a
                                   confirmation
``/dashboard/schedule``            each tick's last and next slot and how they ended
``/dashboard/claims``              unresolved outbound delivery claims (Rails' ledger), with
                                   mark delivered / release (``services.rails``)
``/dashboard/ledger``              upload delivery ledger rows in flight (read-only: the
                                   uploads reconciler moves them)
``/dashboard/audit``               the operator actions taken (``api2.operator_actions``)
``/dashboard/parity``              each product's shadow runs of the bake window per
                                   organization, divergences first (``parity``; what the
                                   products register with ``add_parity``)
=================================  ===========================================================

Sign-in, sign-out, CSRF and the sign-in limit: ``auth``, ``signin``; the security headers
and the shared page helpers: ``web``; the signed ``done=`` banner: ``banner``. Nothing here
writes a job except through the job store's scripts and ``tiers.cancellation``, a flag
except through ``shared.flags``, nor a claim except through
``services.rails.delivery_claims``; each action is audited (``actions``, ``shared.audit``).
"""

from services.app.dashboard import (  # noqa: F401  (each module adds its routes)
    busy_routes,
    failed_routes,
    parity_routes,
    routes,
    signin,
    tenant_routes,
)
from services.app.dashboard.web import blueprint

__all__ = ["blueprint"]
