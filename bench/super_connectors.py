"""The super-source connectors alone, at the end-to-end benchmark's sizes, in one process.

``python -m bench.super_connectors`` builds, on the local protocol servers, a GitHub
repository of ``--github`` issues and pull requests (60/40, one comment each), a Linear team
of ``--linear`` issues (one comment each), a GitLab project of ``--gitlab`` issues and merge
requests, and a Git repository of ``--git`` files, then times for each: building the data
set, a complete walk (pages, refs), ``--fetches`` node fetches, and an incremental walk after
one change. No Redis, database or worker: this is the connectors' own cost, the floor under
``bench.super_sources``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import allow_loopback_providers
from services.connectors import git_repository, github, gitlab, linear
from services.connectors.nodes import Connection, NodeRef, NodeSource
from testkit.fakes.git_repository import commit, init, populate
from testkit.fakes.github_server import GithubServer
from testkit.fakes.gitlab_server import GitlabServer
from testkit.fakes.linear_server import LinearServer


def _timed(step: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = step()
    return result, time.perf_counter() - started


def _walk(
    source: NodeSource, conn: Connection, root: NodeRef, since: str | None = None
) -> tuple[list[NodeRef], str | None, int]:
    refs: list[NodeRef] = []
    checkpoint: str | None = None
    pages = 0
    while True:
        page = source.walk(conn, root, checkpoint, since)
        pages += 1
        refs += page.refs
        checkpoint = page.checkpoint
        if checkpoint is None:
            return refs, page.watermark, pages


def _measure(
    name: str,
    source: NodeSource,
    conn: Connection,
    root: NodeRef,
    build_seconds: float,
    change: Callable[[], object],
    fetches: int,
) -> dict[str, Any]:
    (refs, watermark, pages), walk_seconds = _timed(lambda: _walk(source, conn, root))
    sample = refs[:fetches]
    nodes, fetch_seconds = _timed(lambda: [source.fetch(conn, ref) for ref in sample])
    assert all(node is not None for node in nodes), f"{name}: a listed node could not be fetched"
    change()
    (changed, _, _), again_seconds = _timed(lambda: _walk(source, conn, root, watermark))
    return {
        "source": name,
        "build_s": build_seconds,
        "refs": len(refs),
        "pages": pages,
        "walk_s": walk_seconds,
        "fetch_ms": 1000 * fetch_seconds / max(1, len(sample)),
        "changed_refs": len(changed),
        "incremental_s": again_seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.super_connectors", description=__doc__)
    parser.add_argument("--github", type=int, default=2000)
    parser.add_argument("--linear", type=int, default=1000)
    parser.add_argument("--gitlab", type=int, default=2000)
    parser.add_argument("--git", type=int, default=500)
    parser.add_argument("--fetches", type=int, default=200)
    options = parser.parse_args(argv)
    allow_loopback_providers()
    rows = []

    gh = GithubServer("t")
    with gh as url:
        issues = options.github * 3 // 5
        _, build = _timed(
            lambda: gh.populate(
                "bench/repo", issues=issues, pulls=options.github - issues, comments=1
            )
        )
        conn = Connection("github", 1, 1, url, {"token": "t"}, {})
        rows.append(
            _measure(
                "github",
                github.SOURCE,
                conn,
                NodeRef("GithubRepo", "bench/repo"),
                build,
                lambda: gh.touch("bench/repo", 7),
                options.fetches,
            )
        )

    lin = LinearServer("k")
    with lin as url:
        team, build = _timed(lambda: lin.populate("BEN", issues=options.linear, comments=1))
        conn = Connection("linear", 2, 1, url, {"api_key": "k"}, {})
        first = next(iter(lin.issues))
        rows.append(
            _measure(
                "linear",
                linear.SOURCE,
                conn,
                NodeRef("LinearTeam", team.id),
                build,
                lambda: lin.touch(first),
                options.fetches,
            )
        )

    gl = GitlabServer("g")
    with gl as url:
        half = options.gitlab * 3 // 4
        project, build = _timed(
            lambda: gl.populate(
                "bench/project", issues=half, merge_requests=options.gitlab - half, notes=1
            )
        )
        conn = Connection("gitlab", 3, 1, url, {"token": "g"}, {})
        rows.append(
            _measure(
                "gitlab",
                gitlab.SOURCE,
                conn,
                NodeRef("GitlabProject", str(project.id)),
                build,
                lambda: gl.touch("bench/project", "issues", 3),
                options.fetches,
            )
        )

    with tempfile.TemporaryDirectory() as tmp:
        origin = init(Path(tmp) / "origin.git")
        _, build = _timed(lambda: populate(origin, files=options.git))
        conn = Connection("git", 4, 1, "", {}, {"cache_dir": f"{tmp}/cache"})
        rows.append(
            _measure(
                "git",
                git_repository.SOURCE,
                conn,
                NodeRef("GitRepository", f"file://{origin}"),
                build,
                lambda: commit(origin, {"docs/section1/page1.md": b"# changed"}),
                options.fetches,
            )
        )

    columns = ("source", "build s", "refs", "pages", "full walk s", "fetch ms/node")
    print("| " + " | ".join((*columns, "changed refs", "incremental walk s")) + " |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['source']} | {r['build_s']:.3f} | {r['refs']} | {r['pages']} "
            f"| {r['walk_s']:.2f} | {r['fetch_ms']:.1f} | {r['changed_refs']} "
            f"| {r['incremental_s']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
