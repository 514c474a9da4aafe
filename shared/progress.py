"""Progress of long CLI work on stderr, with ``rich``: a bar when the total is known, a
spinner otherwise; nothing at all when stderr is not a terminal (CI, pipes, log files), so
output meant for machines stays clean.

=====================================  ===========================================================
helper                                 use
=====================================  ===========================================================
``for x in track(items, "what")``      a bar over a sized iterable (re-drives, backfills, checks)
``with steps("what", total) as step``  a bar advanced by hand: ``step()`` or ``step(n)``; ``total``
                                       None gives a spinner with a count (a bench run, a poll loop)
``with working("what")``               a spinner while one long call runs (a check's queries)
=====================================  ===========================================================
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator, Sized
from typing import IO, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

T = TypeVar("T")


def _console(stream: IO[str] | None, *, force: bool | None) -> Console:
    return Console(
        file=stream or sys.stderr, stderr=stream is None, force_terminal=True if force else None
    )


def is_interactive(stream: IO[str] | None = None) -> bool:
    target = stream or sys.stderr
    return bool(getattr(target, "isatty", lambda: False)())


def _progress(stream: IO[str] | None, *, sized: bool, force: bool | None) -> Progress:
    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if sized:
        columns += [BarColumn(), MofNCompleteColumn()]
    else:
        columns += [TextColumn("{task.completed}")]
    columns.append(TimeElapsedColumn())
    shown = is_interactive(stream) if force is None else force
    return Progress(
        *columns, console=_console(stream, force=force), transient=True, disable=not shown
    )


@contextlib.contextmanager
def steps(
    description: str,
    total: int | None = None,
    *,
    stream: IO[str] | None = None,
    force: bool | None = None,
) -> Iterator[Callable[..., None]]:
    """A bar (or a spinner when ``total`` is None); yields ``step(n=1, description=None)``.

    ``force``: show it (True) or not (False) whatever the stream is; None: only on a terminal.
    """
    with _progress(stream, sized=total is not None, force=force) as progress:
        task = progress.add_task(description, total=total)

        def step(advance: int = 1, description: str | None = None) -> None:
            if description is None:
                progress.advance(task, advance)
            else:
                progress.update(task, advance=advance, description=description)

        yield step


def track(
    items: Iterable[T],
    description: str,
    *,
    total: int | None = None,
    stream: IO[str] | None = None,
    force: bool | None = None,
) -> Iterator[T]:
    """Iterate ``items`` with a bar (its length from ``total`` or ``len(items)``)."""
    if total is None and isinstance(items, Sized):
        total = len(items)
    with steps(description, total, stream=stream, force=force) as step:
        for item in items:
            yield item
            step()


@contextlib.contextmanager
def working(
    description: str, *, stream: IO[str] | None = None, force: bool | None = None
) -> Iterator[None]:
    """A spinner with the elapsed time while the block runs."""
    with steps(description, None, stream=stream, force=force):
        yield
