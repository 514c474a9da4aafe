"""``speedtier api``'s gunicorn options: workers, threads per worker and the access log come
from the command; the hooks that give each worker a socket of its own and tune its
collector are set."""

from __future__ import annotations

from click.testing import CliRunner

from services.app.api.gunicorn_worker import WORKER_CLASS
from services.app.api.worker_listeners import WorkerListeners
from services.app.cli.api import THREADS_PER_WORKER, api, server_options


def test_threads_per_worker_default_and_given() -> None:
    default = server_options("127.0.0.1", 8080, 2, "INFO")
    given = server_options("127.0.0.1", 8080, 3, "INFO", threads=2)

    assert (default["workers"], default["threads"]) == (2, THREADS_PER_WORKER)
    assert (given["workers"], given["threads"]) == (3, 2)
    assert given["worker_class"] == WORKER_CLASS  # the JSON-refusing gthread worker either way


def test_the_access_log_is_on_unless_turned_off() -> None:
    assert server_options("127.0.0.1", 8080, 2, "INFO")["accesslog"] == "-"
    assert server_options("127.0.0.1", 8080, 2, "INFO", access_log=False)["accesslog"] is None


def test_threads_must_be_positive() -> None:
    result = CliRunner().invoke(api, ["--threads", "0"])

    assert result.exit_code == 2
    assert "--threads" in result.output


def test_each_worker_gets_a_listener_of_its_own() -> None:
    # Given the options of `speedtier api`
    options = server_options("127.0.0.1", 8080, 2, "INFO")

    # Then the arbiter hands its socket over once ready and each worker opens its own
    # (services.app.api.worker_listeners), one hook object shared by both hooks
    release, open_own = options["when_ready"], options["post_fork"]
    assert release.__self__ is open_own.__self__
    assert release.__func__ is WorkerListeners.release
    assert open_own.__func__ is WorkerListeners.open_own


def test_a_worker_tunes_its_collector_once_its_app_is_built() -> None:
    # gunicorn calls post_worker_init in the worker once the app is loaded (the hook's effect
    # on a process: tests/integration/services/app/api/test_gunicorn_hooks.py)
    assert callable(server_options("127.0.0.1", 8080, 2, "INFO")["post_worker_init"])
