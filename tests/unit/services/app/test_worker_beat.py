"""A worker process's heartbeat: its checks' failures are logged and never stop it, and a
heartbeat file that cannot be written is logged (on the real filesystem: its directory is a
file)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from services.app.worker_process import beat_of


def test_a_failing_check_is_logged_and_the_next_checks_still_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    def failing() -> None:
        ran.append("failing")
        raise RuntimeError("Redis answered something odd")

    beat_file = tmp_path / "beat"
    beat = beat_of(beat_file, lambda: ran.append("live"), (failing, lambda: ran.append("next")))
    beat()
    assert ran == ["live", "failing", "next"]
    assert beat_file.exists()
    failed = [r for r in caplog.records if r.getMessage() == "periodic check failed"]
    assert len(failed) == 1 and failed[0].exc_info is not None


def test_a_heartbeat_file_that_cannot_be_written_is_logged_at_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    ran: list[str] = []
    beat = beat_of(
        not_a_directory / "beat", lambda: ran.append("live"), (lambda: ran.append("check"),)
    )
    beat()
    assert ran == ["live", "check"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "cannot write the heartbeat file" in errors[0].getMessage()
