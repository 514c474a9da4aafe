"""A product's deferred part (``router.deferred``): built once, at its first use, by whichever
caller comes first; its handlers stand in for its methods until then."""

from __future__ import annotations

import threading

import pytest

from router.deferred import Deferred, deferred_of


class Actors:
    """A product's actors, as a deferred part builds them."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def sync(self, organization_id: int, item: str) -> str:
        self.calls.append((organization_id, item))
        return f"synced {item}"


def test_a_part_is_built_at_its_first_get_and_only_then() -> None:
    builds: list[Actors] = []

    def build() -> Actors:
        builds.append(Actors())
        return builds[-1]

    part = Deferred(build)
    assert not part.built and builds == []

    first, second = part.get(), part.get()

    assert part.built and first is second and builds == [first]


def test_callers_arriving_together_share_one_build() -> None:
    # Given a build that holds until the test lets it finish
    release = threading.Event()
    builds: list[Actors] = []

    def build() -> Actors:
        release.wait(10)
        builds.append(Actors())
        return builds[-1]

    part = Deferred(build)
    got: list[Actors] = []
    callers = [threading.Thread(target=lambda: got.append(part.get())) for _ in range(4)]
    # When four threads ask for it before it is built
    for caller in callers:
        caller.start()
    release.set()
    for caller in callers:
        caller.join(10)
    # Then it was built once and every caller got that one part
    assert len(builds) == 1
    assert got == builds * 4


def test_a_failed_build_is_not_kept_the_next_get_builds_again() -> None:
    attempts: list[int] = []

    def build() -> Actors:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("a connector's import failed")
        return Actors()

    part = Deferred(build)
    with pytest.raises(RuntimeError, match="import failed"):
        part.get()
    assert not part.built

    assert isinstance(part.get(), Actors) and len(attempts) == 2


def test_a_handler_stands_in_for_the_method_and_builds_the_part_at_its_first_call() -> None:
    part = Deferred(Actors)
    handler = part.handlers().sync

    # named as the method it stands for, in the module that defers the part (Dramatiq names
    # an actor's logger after them), and traceable to its part
    assert handler.__name__ == "sync"
    assert handler.__module__ == Actors.__module__
    assert deferred_of(handler) is part
    assert not part.built

    assert handler(organization_id=7, item="a") == "synced a"
    assert part.built and part.get().calls == [(7, "a")]


def test_a_handler_built_at_bootstrap_has_no_deferred_part() -> None:
    assert deferred_of(Actors().sync) is None
