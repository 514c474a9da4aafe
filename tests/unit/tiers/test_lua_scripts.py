"""Each script is sent with the preludes' definitions it uses and no others
(``tiers.lua_scripts.link``)."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from tiers.lua_scripts import PRELUDES, _definitions, _names, link, link_all, load_script

LUA = resources.files("tiers") / "lua"
SCRIPTS = sorted(p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua") and p.name[0] != "_")
PRELUDE = """-- the key layout
local ns = KEYS[1]

-- pushes
local function push(queue, id)
    redis.call("rpush", ns .. ":" .. queue, id)
end

local cache = {}
-- a helper of helpers
local function remember(key)

    cache[key] = true
end

local function twice(queue, id)
    remember(id)
    push(queue, id)
    push(queue, id)
end
"""


def defined_in(text: str) -> set[str]:
    return {name for names, _ in _definitions(text) for name in names}


def test_a_body_gets_what_it_names_and_what_that_names_in_the_preludes_order() -> None:
    linked = link([PRELUDE], 'twice("q", ARGV[1])\nreturn 1')
    assert re.findall(r"^local (?:function )?(\w+)", linked, re.M) == [
        "ns",
        "push",
        "cache",
        "remember",
        "twice",
    ]
    # The blank line inside remember() stays in it; the comment above a definition goes with it
    assert "local function remember(key)\n\n    cache[key] = true\nend" in linked
    assert "-- a helper of helpers\nlocal function remember" in linked


def test_names_in_strings_and_comments_do_not_pull_a_definition_in() -> None:
    linked = link([PRELUDE], '-- twice would do\nlocal s = "push, twice"\nreturn ns')
    assert defined_in(linked) & defined_in(PRELUDE) == {"ns"}
    assert _names('x = "a -- b" .. y -- z') == {"x", "y"}


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_prelude_name_a_script_uses_is_defined_in_what_it_is_sent(name: str) -> None:
    preludes = [(LUA / part).read_text() for part in PRELUDES]
    helpers = set().union(*(defined_in(text) for text in preludes))
    sent = load_script(name)
    used = _names(sent) & helpers
    assert used <= defined_in(sent), used - defined_in(sent)


def test_scripts_are_sent_without_the_helpers_they_do_not_use() -> None:
    assert "local function fair_pop" not in load_script("settle")
    assert "local function place" not in load_script("fetch_claim")
    preludes = "\n".join((LUA / part).read_text() for part in PRELUDES)
    assert defined_in(load_script("window")) & defined_in(preludes) == set()


def test_link_all_links_every_script_once_and_names_them() -> None:
    assert link_all() == SCRIPTS
    # what it linked is what each broker is handed: made once, the same text every time
    assert all(load_script(name) is load_script(name) for name in SCRIPTS)
    assert load_script.cache_info().currsize >= len(SCRIPTS)
