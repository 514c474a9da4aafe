"""What a worker's start does not load or build before its first job (each seen in a fresh
interpreter, as a starting worker is; the start itself on real Redis and PostgreSQL is
``tests/integration/services/app/test_worker_start.py``)."""

from __future__ import annotations

from tests.fresh_process import printed_by

HEAVY = ("pydantic", "redis", "sqlalchemy", "dramatiq", "prometheus_client")


def test_the_worker_command_module_loads_none_of_the_libraries_its_pool_forks_with() -> None:
    # The pool's parent starts its children's fork server right after parsing its command
    # line: the server imports these while the parent goes on.
    script = (
        "import sys\n"
        "import services.app.cli.worker\n"
        f"print(*[name in sys.modules for name in {HEAVY!r}])\n"
    )

    assert printed_by(script) == ["False"] * len(HEAVY)


def test_setting_the_process_guard_does_not_load_requests() -> None:
    script = (
        "import sys\n"
        "from shared.egress.addresses import address_guard, default_guard, set_default_guard\n"
        "guard = address_guard(False, ['10.1.0.0/16'])\n"
        "set_default_guard(guard)\n"
        "print('requests' in sys.modules, default_guard() is guard)\n"
        "from shared.egress.session import guarded_session\n"
        "print(guarded_session().get_adapter('https://a.test/').guard is guard)\n"
    )

    assert printed_by(script) == ["False", "True", "True"]


def test_a_familys_params_validator_is_built_at_its_first_validation() -> None:
    script = (
        "from services.ingestion.families import DocumentParams\n"
        "print(DocumentParams.__pydantic_complete__)\n"
        "print(DocumentParams.model_validate({'document_id': 3}).document_id)\n"
        "print(DocumentParams.__pydantic_complete__)\n"
    )

    assert printed_by(script) == ["False", "3", "True"]


def test_the_worker_preload_leaves_the_orm_and_the_opentelemetry_metrics_sdk_out() -> None:
    # What a pool's fork server (and a lone worker process) imports before its first job
    script = (
        "import sys\n"
        "import services.app.fork_server\n"
        "print('sqlalchemy.orm' in sys.modules, 'opentelemetry.sdk.metrics' in sys.modules)\n"
        "import redis.observability.providers\n"
        "print(redis.observability.providers.OTEL_AVAILABLE)\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "print(MeterProvider.__name__)\n"
    )

    # neither the ORM (loaded at a job's first session) nor the metrics SDK redis-py would
    # load for metrics of its own that the platform does not turn on; the SDK itself is
    # still importable by whatever needs it
    assert printed_by(script) == ["False", "False", "False", "MeterProvider"]
