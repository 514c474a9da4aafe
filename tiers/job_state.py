"""Durable job state: what a running job keeps on its Redis job record across attempts.

The seeds' BullMQ ``job.updateData`` (``completedSteps``, ``resolvedDates``): a job writes
here what a retry must find again. It lives on the job record itself
(``<ns>:job:<job id>``), so it shares the record's life exactly:

==============================================  =============================================
what happens to the job                          its state
==============================================  =============================================
retried, delayed, redelivered after a worker     kept: the next attempt reads it back
died (any attempt of the same job)
finished (completed, failed, skipped...)         kept for the record's retention, readable in
                                                 ``speedtier jobs show``
enqueued again after it finished (replaced)      gone: a new job starts from nothing
a superseded (stale) copy writes                 refused: only the copy the record names as
                                                 current may write
==============================================  =============================================

Fields on the record: ``step:<name>`` (a completed step and its JSON result) and
``data:<name>`` (JSON values). :func:`run_steps` is the resumable-steps runner built on it.
A step's effect and its mark are two writes: a crash between them re-runs that one step,
so a step must be idempotent (or claim its sends, ``services.rails.delivery_claims``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import redis
from dramatiq.middleware import CurrentMessage

from shared.cancel_point import cancel_point
from shared.errors import SpeedtierError
from tiers.faults import fault_point
from tiers.job_store import JobStore, as_text, now_ms
from tiers.options import JOB_ID, REDIS_MESSAGE_ID

log = logging.getLogger(__name__)

STEP_PREFIX = "step:"
DATA_PREFIX = "data:"

# Write fields only while this delivery is the record's current one (not a stale copy).
_WRITE = """
local cur = redis.call('hget', KEYS[1], 'cur')
if not cur or (ARGV[1] ~= '' and cur ~= ARGV[1]) then return 0 end
for i = 2, #ARGV, 2 do redis.call('hset', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


class NotInAJob(SpeedtierError, RuntimeError):
    """Job state was asked for outside a running job (no current message)."""


class StaleJobCopy(SpeedtierError, RuntimeError):
    """This delivery is no longer the job's current one (replaced or superseded)."""


class JobState:
    """The durable state of one job.

    Parameters:
      jobs: the job store of the job's tier (``platform.brokers.of_tier(tier).jobs``).
      job_id: the job's deterministic id.
      redis_message_id: the delivery allowed to write ("" writes whatever the current one
        is: the CLI and tests).
    """

    def __init__(self, jobs: JobStore, job_id: str, redis_message_id: str = "") -> None:
        self.client: redis.Redis = jobs.client
        self.key = jobs.record_key(job_id)
        self.job_id = job_id
        self.redis_message_id = redis_message_id
        self._write = self.client.register_script(_WRITE)

    @classmethod
    def current(cls, jobs: JobStore) -> JobState:
        """The state of the job this worker thread is running.

        Raises:
          NotInAJob: called outside a job's run.
        """
        message = CurrentMessage.get_current_message()
        if message is None or JOB_ID not in message.options:
            raise NotInAJob("job state is only available while a job runs")
        return cls(jobs, message.options[JOB_ID], message.options.get(REDIS_MESSAGE_ID, ""))

    # -- reads -------------------------------------------------------------------------------

    def _fields(self) -> dict[str, str]:
        return {as_text(k): as_text(v) for k, v in self.client.hgetall(self.key).items()}

    def completed_steps(self) -> dict[str, Any]:
        """Completed step -> its result, in completion order (the seed's ``completedSteps``)."""
        steps = [
            (json.loads(value), name[len(STEP_PREFIX) :])
            for name, value in self._fields().items()
            if name.startswith(STEP_PREFIX)
        ]
        steps.sort(key=lambda item: (item[0]["at"], item[0]["n"]))
        return {name: entry.get("result") for entry, name in steps}

    def get(self, name: str, default: Any = None) -> Any:
        """A value saved with :meth:`set` (``default`` when none was)."""
        raw = self.client.hget(self.key, DATA_PREFIX + name)
        return json.loads(raw) if raw is not None else default

    def data(self) -> dict[str, Any]:
        return {
            name[len(DATA_PREFIX) :]: json.loads(value)
            for name, value in self._fields().items()
            if name.startswith(DATA_PREFIX)
        }

    # -- writes ------------------------------------------------------------------------------

    def set(self, **values: Any) -> None:
        """Save JSON values on the record (``resolvedDates``, counts the operator reads).

        Raises:
          StaleJobCopy: this delivery is no longer the job's current one.
        """
        pairs: list[str] = []
        for name, value in values.items():
            pairs += [DATA_PREFIX + name, json.dumps(value, sort_keys=True, default=str)]
        self._store(pairs)

    def complete_step(self, name: str, result: Any = None) -> None:
        """Mark step ``name`` done (with a JSON ``result``); a retry will skip it."""
        done = len(self.completed_steps())
        entry = {"at": now_ms(), "n": done, "result": result}
        self._store([STEP_PREFIX + name, json.dumps(entry, sort_keys=True, default=str)])

    def _store(self, pairs: list[str]) -> None:
        if not pairs:
            return
        if not self._write(keys=[self.key], args=[self.redis_message_id, *pairs]):
            raise StaleJobCopy(f"job {self.job_id}: this copy is not the current one")


Step = tuple[str, Callable[[], Any]]


def run_steps(state: JobState, steps: Sequence[Step]) -> dict[str, Any]:
    """Run each step not yet completed, in order, marking each done as it returns.

    A step already in ``state.completed_steps()`` is skipped (its saved result kept); the
    first step that raises stops the run and the job's outcome is that exception, so a retry
    resumes at that step. Returns every step's result by name.

    Parameters:
      state: the job's durable state (``JobState.current(jobs)``, its tier's job store).
      steps: ``(name, callable)`` pairs; each callable's JSON-able return is its result.
    """
    results = state.completed_steps()
    for name, step in steps:
        if name in results:
            log.info("job %s: step %s already completed, skipped", state.job_id, name)
            continue
        cancel_point()  # an operator's cancel stops the job between steps
        results[name] = step()
        state.complete_step(name, results[name])
        fault_point("step.after")
    return results
