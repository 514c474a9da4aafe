"""How a before-run middleware ends a run with an outcome.

Dramatiq logs and swallows any exception a middleware raises in ``before_process_message``
unless it is a ``MiddlewareError``; wrapping the outcome (``Delay``, ``Paused``) in
:class:`Held` makes Dramatiq skip the actor and pass it on to ``after_process_message``,
where the outcomes middleware unwraps it.

The actor's ``throws`` cannot quiet it: Dramatiq looks the actor up only after the
before-run hooks, so it would log every held run as an "unhandled exception" at ERROR with
a traceback (every window hold of a throttled provider). As a ``RateLimitExceeded`` too,
it is logged at DEBUG; the outcomes middleware logs retries of a held run itself.
"""

from __future__ import annotations

from dramatiq.errors import RateLimitExceeded
from dramatiq.middleware import MiddlewareError

from shared.errors import JobError


class Held(MiddlewareError, RateLimitExceeded):
    """A run stopped before the actor by a middleware, carrying the outcome."""

    def __init__(self, outcome: JobError) -> None:
        super().__init__(str(outcome))  # type: ignore[no-untyped-call]
        self.outcome = outcome
