"""The example family of the guide "Add a family" (``docs/guides/add-a-family.md`` includes
this module's marked sections): a product's params model, handler, family and ``register``,
and the tests every new family gets. If the platform changes what a family needs, these tests
fail and the guide's recipe with them, so the page cannot go stale.

The family lives here, in a test module, so that the production registry does not carry an
example; a real product puts each section in the module named in the guide.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from pydantic import BaseModel, Field

from router.requests import JobRequest
from shared.errors import ValidationFailed
from shared.inputs import PARAMS_CONFIG, Text
from tests.fixtures_platform import AUTH, MakePlatform
from tests.platform_harness import serving, wait_until
from tiers.families import Family
from tiers.job_state import JobState
from tiers.job_store import JobStore
from tiers.policies import RetryPolicy

if TYPE_CHECKING:
    from router.context import ServiceContext
    from services.app.bootstrap import Platform

# --8<-- [start:params]
# services/<product>/families.py: what a request carries besides organization_id.
PAUSE_GREETINGS = "pause_api2_greetings"
GREETING_RETRY = RetryPolicy(max_attempts=3, base_seconds=30.0)


class GreetingParams(BaseModel):
    # An unknown field is a 400, not ignored; the validator is built at the first request.
    model_config = PARAMS_CONFIG

    name: Text = Field(min_length=1, max_length=64)


# --8<-- [end:params]


# --8<-- [start:handler]
# services/<product>/actors.py: a thin body; the business logic lives in plain functions.
@dataclass(frozen=True)
class GreetingActors:
    jobs: JobStore

    def greet(self, organization_id: int, name: str) -> None:
        # Idempotent: a redelivery writes the same value again.
        greeting = f"hello {name} from organization {organization_id}"
        JobState.current(self.jobs).set(greeting=greeting)


# --8<-- [end:handler]


# --8<-- [start:family]
# services/<product>/families.py: the family, its handler bound by reference.
def greeting_family(actors: GreetingActors) -> Family:
    return Family(
        name="greeting",  # the actor's name; its queues are greeting.<tier>
        kind="send_greeting",  # the request kind callers send
        handler=actors.greet,
        params=GreetingParams,
        job_id=lambda organization_id, p: f"greeting-{organization_id}-{p.name}",
        fixed_tier="maintenance",  # or provider=... to follow the tier table
        group_caps={"maintenance": 1},  # one greeting at a time per organization
        pause_flag=PAUSE_GREETINGS,
        retry=GREETING_RETRY,
    )


# --8<-- [end:family]


# --8<-- [start:register]
# services/<product>/__init__.py: what bootstrap calls for every module in SERVICE_MODULES.
def register(platform: ServiceContext) -> None:
    jobs = platform.brokers.of_tier("maintenance").jobs
    # Built at their first use (a worker's first job, or once it consumes), with whatever
    # they import: a worker starts without them.
    actors = platform.defer(lambda: GreetingActors(jobs))
    platform.add_family(greeting_family(actors.handlers()))


# --8<-- [end:register]


@contextlib.contextmanager
def maintenance_worker(platform: Platform) -> Iterator[None]:
    """A real Dramatiq worker over the maintenance tier's queues, in a thread."""
    with serving(
        platform.brokers.of_tier("maintenance"),
        platform.registry.queues_of_tier("maintenance"),
        threads=2,
    ):
        yield


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(services=[__name__])


def state(platform: Platform, job_id: str) -> str | None:
    record = platform.brokers.of_tier("maintenance").jobs.record(job_id)
    return record["state"] if record else None


# --8<-- [start:tests]
def test_a_greeting_runs_once_under_its_id(platform: Platform) -> None:
    # Given the same greeting requested twice before a worker runs
    request = JobRequest("send_greeting", 7, {"name": "ada"})
    first, second = platform.router.enqueue(request), platform.router.enqueue(request)
    assert (first.outcome, second.outcome) == ("added", "deduplicated")
    assert (first.job_id, first.queue) == ("greeting-7-ada", "greeting.maintenance")

    # When a maintenance worker runs
    with maintenance_worker(platform):
        wait_until(lambda: state(platform, "greeting-7-ada") == "completed")

    # Then it ran once and kept its result on the job record
    jobs = platform.brokers.of_tier("maintenance").jobs
    assert JobState(jobs, "greeting-7-ada").get("greeting") == "hello ada from organization 7"
    assert jobs.record("greeting-7-ada")["attempts"] == "1"  # type: ignore[index]


def test_a_raised_kill_switch_skips_queued_greetings(platform: Platform) -> None:
    platform.flags.set(PAUSE_GREETINGS, True)
    platform.router.enqueue(JobRequest("send_greeting", 7, {"name": "bob"}))
    with maintenance_worker(platform):
        wait_until(lambda: state(platform, "greeting-7-bob") == "skipped")


def test_a_bad_request_is_refused_whole(platform: Platform) -> None:
    good = JobRequest("send_greeting", 7, {"name": "ada"})
    bad = JobRequest("send_greeting", 7, {"name": "", "extra": 1})
    with pytest.raises(ValidationFailed):
        platform.router.enqueue_many([good, bad])
    assert state(platform, "greeting-7-ada") is None  # nothing was enqueued


def test_rails_enqueues_a_greeting_over_http(platform: Platform) -> None:
    from services.app.api import create_app

    client = create_app(platform, warn_open=False).test_client()
    body = {"requests": [{"kind": "send_greeting", "organization_id": 7, "name": "cy"}]}
    answer = client.post("/internal/jobs/enqueue", json=body, headers=AUTH)
    assert answer.status_code == 202, answer.get_json()
    assert answer.get_json()["jobs"][0]["job_id"] == "greeting-7-cy"


# --8<-- [end:tests]
