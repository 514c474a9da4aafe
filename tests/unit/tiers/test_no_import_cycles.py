"""No import circle among the platform's modules in tiers/, router/, shared/ and
services/app: in a circle no module is the lower one, so none can be read, tested or moved
without the others. The graph is import-linter's (grimp), imports under ``TYPE_CHECKING``
included: they bind the modules for a reader and for the type checker as much as any."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import grimp

PACKAGES = ("shared", "tiers", "router", "services")
CHECKED = ("shared", "tiers", "router", "services.app")


def is_checked(module: str) -> bool:
    return any(module == root or module.startswith(root + ".") for root in CHECKED)


def circles(graph: grimp.ImportGraph, modules: Iterable[str]) -> Iterator[frozenset[str]]:
    """The strongly connected sets of two modules or more among ``modules`` (Tarjan's
    algorithm, iterative), following only imports between ``modules``."""
    inside = set(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for root in sorted(inside):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & inside)))]
        while work:
            module, imported = work[-1]
            following = next(imported, None)
            if following is not None:
                if following not in index:
                    index[following] = low[following] = len(index)
                    stack.append(following)
                    on_stack.add(following)
                    found = graph.find_modules_directly_imported_by(following) & inside
                    work.append((following, iter(sorted(found))))
                elif following in on_stack:
                    low[module] = min(low[module], index[following])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == module:
                        break
                if len(members) > 1:
                    yield frozenset(members)


def one_loop(graph: grimp.ImportGraph, circle: frozenset[str]) -> str:
    """A loop through the circle, as ``a -> b -> ... -> a``, for the failure message."""
    start = min(circle)
    step = min(graph.find_modules_directly_imported_by(start) & circle)
    back = graph.find_shortest_chain(importer=step, imported=start)
    assert back is not None
    return " -> ".join((start, *back))


def test_no_import_circle_among_tiers_router_shared_and_the_assembly() -> None:
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    found = set(circles(graph, (m for m in graph.modules if is_checked(m))))
    new = sorted(found, key=min)
    assert not new, "import circles:\n" + "\n".join(
        f"{', '.join(sorted(c))} (one loop: {one_loop(graph, c)})" for c in new
    )


def test_the_check_finds_a_circle_it_is_given() -> None:
    graph = grimp.ImportGraph()
    for module in ("tiers", "tiers.a", "tiers.b", "tiers.c", "tiers.d"):
        graph.add_module(module)
    graph.add_import(importer="tiers.a", imported="tiers.b")
    graph.add_import(importer="tiers.b", imported="tiers.c")
    graph.add_import(importer="tiers.c", imported="tiers.a")
    graph.add_import(importer="tiers.c", imported="tiers.d")
    assert list(circles(graph, graph.modules)) == [frozenset({"tiers.a", "tiers.b", "tiers.c"})]
    loop = one_loop(graph, frozenset({"tiers.a", "tiers.b", "tiers.c"}))
    assert loop == "tiers.a -> tiers.b -> tiers.c -> tiers.a"
