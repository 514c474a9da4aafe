"""One unit of work: database writes, then the jobs they call for, in that order.

The platform's durable follow-ups (DESIGN.md, contract 6) in one place, as Warehouse sends
its tasks after the transaction commits:

==========================================  =============================================
what happens                                 outcome
==========================================  =============================================
the block commits, the enqueue succeeds      both done; ``commit()`` returns the answers
the block commits, Redis refuses the jobs    the writes stay; ``commit()`` raises
                                             ``QueueUnavailable``: a job fails (its retry
                                             re-derives the same child ids), a route answers
                                             or leaves the work to a sweep
the block raises, or never commits           rolled back; nothing is enqueued
a request is invalid                         ``ValidationFailed`` before the commit: nothing
                                             written, nothing enqueued
==========================================  =============================================

Requests are validated when added (``enqueue``), so a bad follow-up cannot leave a commit
behind with nothing to run it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

from router.enqueue import Enqueued, Router
from router.requests import JobRequest, RoutedJob, route_all


class UnitOfWork:
    """A session whose follow-up jobs are enqueued only after it commits.

    Parameters:
      session: the open session (closed by :func:`unit_of_work`).
      router: where follow-ups go.
    """

    def __init__(self, session: Session, router: Router) -> None:
        self.session = session
        self.router = router
        self.follow_ups: list[RoutedJob] = []
        self.committed = False

    def enqueue(self, *requests: JobRequest) -> None:
        """Send these requests once the unit commits. Raises ``ValidationFailed`` now for
        an invalid one."""
        self.follow_ups.extend(route_all(self.router.registry, requests))

    def commit(self) -> list[Enqueued]:
        """Commit, then enqueue the follow-ups (raises ``QueueUnavailable`` when Redis
        refuses them; the writes stay committed)."""
        self.session.commit()
        self.committed = True
        follow_ups, self.follow_ups = self.follow_ups, []
        return self.router.enqueue_routed(follow_ups) if follow_ups else []


@contextmanager
def unit_of_work(sessions: sessionmaker[Session], router: Router) -> Iterator[UnitOfWork]:
    """A :class:`UnitOfWork`; whatever it did not commit is rolled back when the block
    ends, and follow-ups it did not commit are dropped."""
    session = sessions()
    try:
        yield UnitOfWork(session, router)
    finally:
        session.rollback()
        session.close()
