"""Log context: while a message is processed, every log record of its thread carries the
job's id, family, organization, tier and attempt (``shared.observability.current_job``).

First in the stack, so the claim's and the settlement's records carry it too; cleared after
the run or the skip, so the thread's next records do not inherit it.
"""

from __future__ import annotations

from typing import Any

from dramatiq.broker import Broker
from dramatiq.middleware import Middleware

from shared.observability import current_job
from tiers.middleware.job_metrics import tier_of_queue
from tiers.options import FAILURES, JOB_ID, ORGANIZATION


class LogContext(Middleware):
    def before_process_message(self, broker: Broker, message: Any) -> None:
        options = message.options
        current_job.set(
            {
                "job_id": options.get(JOB_ID),
                "family": message.actor_name,
                "organization": options.get(ORGANIZATION) or None,
                "tier": tier_of_queue(message.queue_name),
                "attempt": int(options.get(FAILURES, 0)) + 1,
            }
        )

    def after_process_message(
        self,
        broker: Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        current_job.set(None)

    def after_skip_message(self, broker: Broker, message: Any) -> None:
        current_job.set(None)
