"""shared.lazy_package and its use for prometheus_client: a recording process loads the
metric classes only; the first use of a package-level name runs the package's __init__, after
which the package behaves as a normally imported one. Each check runs in a fresh interpreter
(the test process has imported everything)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.fresh_process import printed_by

EXPOSITION = ("prometheus_client.exposition", "http.server", "urllib.request", "wsgiref")


def test_a_process_that_records_metrics_leaves_the_exposition_half_unloaded() -> None:
    # When a fresh process declares and records every kind of metric, in multiprocess mode
    # too (the value class is picked again then)
    words = printed_by(
        textwrap.dedent(
            f"""
            import sys, tempfile
            from shared import metrics
            metrics.use_directory(tempfile.mkdtemp())
            metrics.counter("lazy_runs", "runs", ["kind"]).labels("a").inc()
            metrics.histogram("lazy_seconds", "seconds").observe(0.2)
            metrics.gauge("lazy_busy", "busy").set(3)
            print(*[name in sys.modules for name in {EXPOSITION!r}])
            """
        )
    )
    # Then none of the exposition modules was imported
    assert words == ["False"] * len(EXPOSITION)


def test_the_first_scrape_loads_the_package_and_sees_values_recorded_before() -> None:
    # Given a process (single-process mode) that recorded a value with the package deferred
    words = printed_by(
        textwrap.dedent(
            """
            import os, sys
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            from shared import metrics
            metrics.counter("lazy_early", "early").inc(7)
            before = "prometheus_client.exposition" in sys.modules
            body = metrics.render()[0].decode()
            import prometheus_client
            print(before, "prometheus_client.exposition" in sys.modules)
            print("speedtier_lazy_early_total 7.0" in body)
            # the default collectors the real package registers answer in the same scrape
            lines = body.splitlines()
            print(any(line.startswith("process_resident_memory_bytes") for line in lines))
            registry = sys.modules["prometheus_client.registry"]
            print(prometheus_client.REGISTRY is registry.REGISTRY)
            served = callable(prometheus_client.start_http_server)
            print(prometheus_client.Counter is metrics.Counter, served)
            """
        )
    )
    # Then the scrape loaded the rest, saw the earlier value and the process collector, and the
    # package's names are the very objects the recording side used
    assert words == ["False", "True", "True", "True", "True", "True", "True"]


def _printed_beside_a_package(root: Path, script: str) -> list[str]:
    """What ``script`` prints in a fresh process that can import ``lazypkg``: a package whose
    ``__init__`` imports ``heavy`` and a name of ``light``, which imports ``helper``."""
    package = root / "lazypkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from . import heavy\nfrom .light import VALUE\nINITIALISED = True\n"
    )
    (package / "light.py").write_text("from . import helper\nVALUE = helper.ONE + 1\n")
    (package / "helper.py").write_text("ONE = 1\n")
    (package / "heavy.py").write_text("LOADED = True\n")
    prelude = f"import sys\nsys.path.insert(0, {str(root)!r})\n"
    return printed_by(prelude + textwrap.dedent(script))


@pytest.mark.parametrize(
    ("use", "expected"),
    [
        # a submodule, imported in each of the ways Python has: only what it needs is loaded
        ("import lazypkg.light as m; print(m.VALUE)", ["2", "False", "False"]),
        ("from lazypkg import light; print(light.VALUE)", ["2", "False", "False"]),
        ("print(lazypkg.helper.ONE)", ["1", "False", "False"]),
        # a package-level name runs __init__ (which then imports heavy)
        ("print(lazypkg.VALUE)", ["2", "True", "True"]),
        ("from lazypkg import INITIALISED; print(INITIALISED)", ["True", "True", "True"]),
    ],
)
def test_submodules_load_alone_and_a_package_name_runs_init(
    tmp_path: Path, use: str, expected: list[str]
) -> None:
    words = _printed_beside_a_package(
        tmp_path,
        f"""
        from shared.lazy_package import defer_init
        lazypkg = defer_init("lazypkg")
        {use}
        print("lazypkg.heavy" in sys.modules, "INITIALISED" in vars(lazypkg))
        """,
    )
    assert words == expected


def test_a_missing_name_is_an_attribute_error_after_init_and_imported_packages_are_kept(
    tmp_path: Path,
) -> None:
    words = _printed_beside_a_package(
        tmp_path,
        """
        import lazypkg
        from shared.lazy_package import defer_init
        print(defer_init("lazypkg") is lazypkg)
        del sys.modules["lazypkg"], sys.modules["lazypkg.light"], sys.modules["lazypkg.heavy"]
        deferred = defer_init("lazypkg")
        try:
            deferred.nothing_here
        except AttributeError as error:
            print("AttributeError", "INITIALISED" in vars(deferred))
        """,
    )
    assert words == ["True", "AttributeError", "True"]


def test_defer_init_refuses_a_plain_module() -> None:
    from shared.lazy_package import defer_init

    with pytest.raises(ImportError, match="not an importable package"):
        defer_init("no_such_package_anywhere")


def test_threads_that_first_use_the_package_together_each_get_the_real_names() -> None:
    # When eight threads of a process that only recorded values ask for exposition names at
    # once (two scrapes of a pool's port arriving together)
    words = printed_by(
        textwrap.dedent(
            """
            import sys, threading
            from shared import metrics
            metrics.counter("lazy_threads", "runs").inc()
            import prometheus_client
            barrier = threading.Barrier(8)
            got = []

            def scrape():
                barrier.wait()
                got.append(prometheus_client.generate_latest is not None)
                got.append(b"speedtier_lazy_threads_total 1.0" in metrics.render()[0])

            threads = [threading.Thread(target=scrape) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            print(len(got), all(got))
            """
        )
    )
    # Then the package's __init__ ran once for all of them and every one saw the real names
    assert words == ["16", "True"]
