"""The broker calls only the middleware that hook a signal (``tiers.hooks``), in the stack's
order, and sees a middleware added (or a hook set on an instance) after signals were
emitted."""

from __future__ import annotations

from typing import Any

from dramatiq import Broker, Middleware

from tiers.hooks import HookTable


class Acks(Middleware):
    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    def before_ack(self, broker: Broker, message: Any) -> None:
        self.seen.append(f"before {self.name}")

    def after_ack(self, broker: Broker, message: Any) -> None:
        self.seen.append(f"after {self.name}")


class Quiet(Middleware):
    """Hooks nothing."""


def test_only_middleware_overriding_a_hook_are_listed_in_stack_order() -> None:
    one, two, quiet = Acks("one", []), Acks("two", []), Quiet()
    table = HookTable()
    assert table.hooking([one, quiet, two], "before_ack") == (one, two)
    assert table.hooking([one, quiet, two], "before_process_message") == ()


def test_a_middleware_added_later_is_seen() -> None:
    table = HookTable()
    stack: list[Middleware] = [Quiet()]
    assert table.hooking(stack, "after_ack") == ()
    acks = Acks("late", [])
    stack.append(acks)
    assert table.hooking(stack, "after_ack") == (acks,)


def test_a_hook_set_on_an_instance_counts() -> None:
    quiet = Quiet()
    quiet.after_ack = lambda broker, message: None  # type: ignore[method-assign]
    assert HookTable().hooking([quiet], "after_ack") == (quiet,)


def test_an_unknown_signal_goes_to_every_middleware() -> None:
    stack = [Quiet(), Acks("x", [])]
    assert HookTable().hooking(stack, "before_something_new") == tuple(stack)
