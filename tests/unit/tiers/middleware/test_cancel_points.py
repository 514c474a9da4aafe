"""A handler's cancel points stop it when an operator cancelled the job and when its run lost
its delivery (a stalled worker whose job runs elsewhere), without a Redis round trip."""

from __future__ import annotations

from typing import Any

import pytest

from shared.cancel_point import cancel_point
from shared.errors import DeliveryLost
from tiers.deliveries import Delivery, set_current
from tiers.middleware.cancel import CancelWatch


@pytest.fixture
def watched() -> Any:
    watch = CancelWatch(grace_seconds=30.0)
    watch.started("job-1")
    yield watch
    watch.finished()
    set_current(None)


def test_a_run_that_holds_its_delivery_goes_on(watched: CancelWatch) -> None:
    set_current(Delivery(jobs=None, job_id="job-1", epoch="3"))  # type: ignore[arg-type]
    cancel_point()  # nothing raised


def test_a_run_that_lost_its_delivery_stops_at_its_next_cancel_point(
    watched: CancelWatch,
) -> None:
    delivery = Delivery(jobs=None, job_id="job-1", epoch="3")  # type: ignore[arg-type]
    set_current(delivery)
    delivery.lost.set()  # the worker's delivery check saw a newer run of the job
    with pytest.raises(DeliveryLost):
        cancel_point()
