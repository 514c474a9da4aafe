"""The platform's Lua scripts (``tiers/lua/*.lua``), each sent with the shared helpers it uses
in front of it (Redis scripts cannot import): from ``_prelude.lua`` (the key layout, the queue
and parked-list helpers), ``_fair.lua`` (the fair order of grouped messages) and
``_slots.lua`` (group slots and claims).

Redis runs a script's whole text at every call, so every helper sent with it is a closure (or
a table) made again at every call: the three preludes whole cost several times what a script
returning at once costs (docs/benchmarks.md). :func:`link` sends, of the
preludes' top-level definitions (``local function name`` and ``local name = ...``, each with
the comment above it), those the body names, those they name, and so on, in the preludes'
order; a definition nothing names is left out.

The files do not change while a process runs, so each script is linked once per process
(:func:`load_script` keeps what it made), and a worker pool's fork server links them all
before it forks a child (:func:`link_all`), so no child spends its start on it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from importlib import resources

#: The helpers' files, in the order their definitions are sent.
PRELUDES = ("_prelude.lua", "_fair.lua", "_slots.lua")

#: A top-level definition's first line: the names it defines.
_DEFINITION = re.compile(r"^local\s+(?:function\s+(\w+)|([\w\s,]+?)\s*=)")
_NAME = re.compile(r"[A-Za-z_]\w*")
#: A string literal (whose text names nothing) or a comment (to the end of its line).
_NOT_CODE = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|--[^\n]*')


@functools.cache
def load_script(name: str) -> str:
    """The source of ``tiers/lua/<name>.lua``, with the preludes' definitions it uses."""
    return link(_prelude_texts(), (resources.files("tiers") / "lua" / f"{name}.lua").read_text())


@functools.cache
def _prelude_texts() -> tuple[str, ...]:
    base = resources.files("tiers") / "lua"
    return tuple((base / part).read_text() for part in PRELUDES)


def link_all() -> list[str]:
    """Link every script of ``tiers/lua`` (each file not named ``_*.lua``, the preludes);
    their names."""
    base = resources.files("tiers") / "lua"
    names = sorted(
        entry.name.removesuffix(".lua")
        for entry in base.iterdir()
        if entry.name.endswith(".lua") and not entry.name.startswith("_")
    )
    for name in names:
        load_script(name)
    return names


def link(preludes: Sequence[str], body: str) -> str:
    """``body`` after the definitions of ``preludes`` it needs (see the module's text)."""
    definitions = _parsed(tuple(preludes))
    needed = _names(body)
    chosen = [False] * len(definitions)
    # Later definitions may name earlier ones only (a Lua local is visible after its
    # statement), so one pass from the last to the first settles what is needed.
    for index in range(len(definitions) - 1, -1, -1):
        defined, _, names = definitions[index]
        if defined & needed:
            chosen[index] = True
            needed |= names
    kept = [text for (_, text, _), keep in zip(definitions, chosen, strict=True) if keep]
    return "\n".join([*kept, body])


@functools.cache
def _parsed(preludes: tuple[str, ...]) -> tuple[tuple[frozenset[str], str, frozenset[str]], ...]:
    """The definitions of ``preludes``, in order: the names each defines, its text and the
    names it uses; parsed once for all the scripts linked with the same preludes."""
    return tuple(
        (frozenset(defined), text, frozenset(_names(text)))
        for prelude in preludes
        for defined, text in _definitions(prelude)
    )


def _definitions(text: str) -> list[tuple[set[str], str]]:
    """A prelude's top-level definitions: the names each defines and its text, with the
    comment and blank lines above it (the file's opening comment goes with its first
    definition). Comment and blank lines after the last definition are dropped."""
    found: list[tuple[set[str], list[str]]] = []
    above: list[str] = []
    for line in text.splitlines():
        match = _DEFINITION.match(line)
        if match:
            names = {match.group(1)} if match.group(1) else set(_NAME.findall(match.group(2)))
            found.append((names, [*above, line]))
            above = []
        elif found and not _is_gap(line):
            found[-1][1].extend([*above, line])
            above = []
        else:
            above.append(line)
    return [(names, "\n".join(lines)) for names, lines in found]


def _is_gap(line: str) -> bool:
    """A line between definitions: blank, or a comment at the start of a line."""
    return not line.strip() or line.startswith("--")


def _names(code: str) -> set[str]:
    """The identifiers ``code`` uses outside its strings and comments."""
    return set(_NAME.findall(_NOT_CODE.sub(" ", code)))
