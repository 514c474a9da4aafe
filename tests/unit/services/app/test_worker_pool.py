"""The worker pool's restart backoff (the pool itself is tested on real processes in
``tests/e2e/test_worker_pool.py``)."""

from services.app.worker_pool import RestartPolicy


def test_the_backoff_doubles_with_each_recent_restart_up_to_its_ceiling() -> None:
    policy = RestartPolicy(backoff_seconds=1, max_backoff_seconds=30)
    assert [policy.delay(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
