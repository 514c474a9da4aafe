"""``speedtier api``'s gunicorn options: workers, threads per worker and the access log come
from the command."""

from __future__ import annotations

from click.testing import CliRunner

from services.app.api.gunicorn_worker import WORKER_CLASS
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
