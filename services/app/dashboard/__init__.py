"""The operator's dashboard, ``/dashboard``: server-rendered pages over the live platform.

=================================  ===========================================================
page                               what it shows / does
=================================  ===========================================================
``/dashboard/``                    waiting, delayed, parked, active and failed per tier and
                                   family, refreshed every few seconds
``/dashboard/orgs``                per organization and family: backlog, running versus cap,
                                   parked, predicted start of its next job (``prediction``)
``/dashboard/jobs?id=``            a job's record; ``/dashboard/failed`` the failed jobs, with
                                   retry and discard (``tiers.dead_letters``)
``/dashboard/windows``             provider windows: use now and over the last hour
``/dashboard/switches``            kill switches (Flipper's tables), raise/lower after a
                                   confirmation
``/dashboard/schedule``            each tick's last and next slot and how they ended
``/dashboard/claims``              unresolved outbound delivery claims (Rails' ledger), with
                                   mark delivered / release (``services.rails``)
``/dashboard/ledger``              upload delivery ledger rows in flight (read-only: the
                                   uploads reconciler moves them)
``/dashboard/audit``               the operator actions taken (``api2.operator_actions``)
=================================  ===========================================================

Sign-in and CSRF: ``auth``. Nothing here writes Redis except through the job store's
scripts, a flag except through ``shared.flags``, nor a claim except through
``services.rails.delivery_claims``; each action is audited (``actions``).
"""

from services.app.dashboard.routes import blueprint

__all__ = ["blueprint"]
