"""Which middleware of a stack hook a signal: the broker calls only those.

Dramatiq's ``emit_before``/``emit_after`` call every middleware's hook for every signal,
most of them ``Middleware``'s no-ops: a run emits four signals (``process_message`` before
and after, ``ack`` before and after) through nine middleware, about 36 calls and lookups
where a dozen do something. :class:`HookTable` works out, per signal, the middleware whose
class (or instance) overrides the hook, and works it out again whenever the stack changes
(``add_middleware``, or the list edited in place); the calls made, their order and their
error handling stay Dramatiq's.
"""

from __future__ import annotations

from collections.abc import Sequence

from dramatiq.middleware import Middleware


class HookTable:
    """The middleware hooking each signal, for the stack last seen."""

    def __init__(self) -> None:
        self._stack: tuple[Middleware, ...] = ()
        self._by_signal: dict[str, tuple[Middleware, ...]] = {}

    def hooking(self, stack: Sequence[Middleware], signal: str) -> tuple[Middleware, ...]:
        """The middleware of ``stack``, in its order, whose ``signal`` hook (e.g.
        ``before_ack``) is not ``Middleware``'s no-op."""
        current = tuple(stack)
        if current != self._stack:
            self._stack, self._by_signal = current, {}
        hooked = self._by_signal.get(signal)
        if hooked is None:
            hooked = self._by_signal[signal] = tuple(m for m in current if _hooks(m, signal))
        return hooked


def _hooks(middleware: Middleware, signal: str) -> bool:
    """Whether calling ``signal`` on ``middleware`` can do anything."""
    default = getattr(Middleware, signal, None)
    if default is None or signal in vars(middleware):
        return True
    return getattr(type(middleware), signal, None) is not default
