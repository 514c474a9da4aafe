"""A command beside a running ``speedtier up`` runs in ``up``'s environment when its own
``SPEEDTIER_ENV`` is unset (which means production), and only then."""

from __future__ import annotations

from pathlib import Path

from shared import runtime_file


def running_up(data_dir: Path, environment: str | None = "development") -> None:
    # This test process stands for the running `up` (the file names a live pid).
    runtime_file.write(
        str(data_dir),
        redis_url="redis://127.0.0.1:6379/0",
        database_url="postgresql://127.0.0.1/speedtier",
        environment=environment,
    )


def test_an_unset_environment_is_the_running_ups(tmp_path: Path) -> None:
    running_up(tmp_path)
    environ = {"SPEEDTIER_DATA_DIR": str(tmp_path)}
    runtime_file.adopt_environment(environ)
    assert environ["SPEEDTIER_ENV"] == "development"


def test_a_set_environment_is_kept(tmp_path: Path) -> None:
    running_up(tmp_path)
    environ = {"SPEEDTIER_DATA_DIR": str(tmp_path), "SPEEDTIER_ENV": "staging"}
    runtime_file.adopt_environment(environ)
    assert environ["SPEEDTIER_ENV"] == "staging"


def test_without_a_running_up_nothing_is_set(tmp_path: Path) -> None:
    environ = {"SPEEDTIER_DATA_DIR": str(tmp_path)}
    runtime_file.adopt_environment(environ)
    assert "SPEEDTIER_ENV" not in environ
    # nor from a file whose writer is gone
    (tmp_path / runtime_file.FILE_NAME).write_text(
        '{"pid": 999999999, "redis_url": "r", "database_url": "d", "environment": "development"}'
    )
    runtime_file.adopt_environment(environ)
    assert "SPEEDTIER_ENV" not in environ


def test_a_file_from_an_older_up_names_no_environment(tmp_path: Path) -> None:
    running_up(tmp_path, environment=None)
    environ = {"SPEEDTIER_DATA_DIR": str(tmp_path)}
    runtime_file.adopt_environment(environ)
    assert "SPEEDTIER_ENV" not in environ


def test_the_default_data_dir_is_the_settings_default() -> None:
    from shared.config import Settings

    assert Settings.model_fields["data_dir"].default == runtime_file.DEFAULT_DATA_DIR
