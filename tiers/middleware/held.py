"""How a before-run middleware ends a run with an outcome.

Dramatiq logs and swallows any exception a middleware raises in ``before_process_message``
unless it is a ``MiddlewareError``; wrapping the outcome (``Delay``, ``Paused``) in
:class:`Held` makes Dramatiq skip the actor and pass it on to ``after_process_message``,
where the outcomes middleware unwraps it.
"""

from __future__ import annotations

from dramatiq.middleware import MiddlewareError

from shared.errors import JobError


class Held(MiddlewareError):
    """A run stopped before the actor by a middleware, carrying the outcome."""

    def __init__(self, outcome: JobError) -> None:
        super().__init__(str(outcome))
        self.outcome = outcome
