"""The ``speedtier`` program's entry point: the console script and ``python -m
services.app.cli`` start here, then run the command (``services.app.cli``).

``speedtier worker --tier T --processes N --threads M`` with N over 1, the command the Helm
chart runs for each tier, forks its children from a server that imports the worker's
modules (``services.app.fork_server``), and a new pod's first job waits for those imports.
This module starts that server before anything else loads (the command line library and
the commands' modules), so the server imports while this process goes on to parse the
command line and to read and check the settings. It reads the command line only as far as
it needs to recognise that form: ``worker`` followed by ``--tier``, ``--processes``,
``--threads`` and ``--prefetch`` only, each at most once, as ``--name value`` or
``--name=value``. Any other command line goes the usual way (the worker command starts the
server itself once it has its options), and a server started for a command line the command
then refuses exits after this process does.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence

from services.app.process_env import leave_pydantic_plugins_out

#: The options a worker pool's command line may have for its server to start here.
POOL_OPTIONS = frozenset({"--tier", "--processes", "--threads", "--prefetch"})


def pool_options(argv: Sequence[str]) -> dict[str, str] | None:
    """The options of ``argv`` (the arguments after the program's name) when it is
    ``worker`` followed by :data:`POOL_OPTIONS` only, each at most once; else None."""
    if not argv or argv[0] != "worker":
        return None
    options: dict[str, str] = {}
    rest = list(argv[1:])
    while rest:
        name, equals, value = rest.pop(0).partition("=")
        if not equals:
            if not rest:
                return None
            value = rest.pop(0)
        if name not in POOL_OPTIONS or name in options:
            return None
        options[name] = value
    return options


def _count(text: str | None) -> int | None:
    if text is None or not text.isascii():
        return None
    try:
        return int(text)
    except ValueError:
        return None


def forks_a_pool(argv: Sequence[str]) -> bool:
    """Whether ``argv`` runs a worker pool whose server the worker command starts as soon as
    it has its options: ``--processes`` over 1 and ``--threads`` given (numbers)."""
    options = pool_options(argv)
    if options is None:
        return False
    processes, threads = _count(options.get("--processes")), _count(options.get("--threads"))
    return processes is not None and processes > 1 and threads is not None and threads >= 1


def start_pool_server() -> None:
    """Start the worker pool's server now, forked before this process loads anything else
    (``services.app.server_first``); the worker command finds it running. The collector stays
    off in this process until the command turns it on (it is off while modules load)."""
    gc.disable()
    from services.app.server_first import fork_server_first

    fork_server_first()


def main() -> None:
    """Run the ``speedtier`` command of ``sys.argv``."""
    leave_pydantic_plugins_out()
    if forks_a_pool(sys.argv[1:]):
        start_pool_server()
    from services.app.cli import main as command

    command()
