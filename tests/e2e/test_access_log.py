"""``speedtier api``'s logs under gunicorn hold no credential and one line per record: the
Basic-auth user name (``curl -u "$TOKEN:"``) and the Authorization header never reach the
access log, and a request path with ``%0a`` or a header with an escape sequence forges no
line in the access log nor in the text log (``services.app.api.access_log``)."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_gunicorn_refusals import REPO, exchange, free_port, serving
from tests.fixtures_platform import TOKEN

FORGED = "2026-12-06 12:00:00,000 ERROR 1 speedtier: forged"


def request(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: t", "Connection: close", *headers, "", ""]
    return "\r\n".join(lines).encode("latin-1")


@pytest.mark.slow
def test_no_credential_and_no_forged_line_reaches_the_logs(
    redis_url: str, database_url: str, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
        "SPEEDTIER_LOG_FORMAT": "text",
        "INTERNAL_API_TOKEN": TOKEN,
    }
    command = [
        sys.executable, "-m", "services.app.cli", "api",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--threads", "2",
    ]  # fmt: skip
    out, err = (tmp_path / "stdout").open("w+"), (tmp_path / "stderr").open("w+")
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err)
    basic = base64.b64encode(f"{TOKEN}:".encode()).decode()
    try:
        deadline = time.monotonic() + 30
        while not serving(port):
            assert process.poll() is None, (tmp_path / "stderr").read_text()[-2000:]
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.1)
        # curl -u "$TOKEN:" (Basic, the token as user name), a bearer token, a cookie
        sent = [
            request("/internal/openapi.json", f"Authorization: Basic {basic}"),
            request("/internal/openapi.json", f"Authorization: Bearer {TOKEN}"),
            request("/dashboard/", f"Cookie: speedtier_operator=ann|1|{TOKEN}"),
            # a wrong token on a path that decodes to two lines: the app logs the path
            request(f"/internal/x%0a{FORGED.replace(' ', '%20')}", "Authorization: Bearer no"),
            request("/healthz", "User-Agent: curl\x1b[2J\x85" + FORGED),
        ]
        statuses = [exchange(port, raw)[0] for raw in sent]
        assert statuses[:2] == [401, 200] and statuses[3] == 401
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=40)
    access = (tmp_path / "stdout").read_text()
    text_log = (tmp_path / "stderr").read_text()
    # Then the access log has one line per request (the probe's /healthz included) ...
    lines = [line for line in access.splitlines() if line]
    assert len([line for line in lines if '"GET /healthz' not in line]) == 4, access
    assert not any(line.startswith(FORGED[:19]) for line in lines), access
    assert "\x1b" not in access and "\x85" not in access
    # ... none with the token, in any of the forms it was sent
    assert TOKEN not in access and basic not in access
    assert '"GET /internal/openapi.json HTTP/1.1" 401' in access
    # And the app's own text log kept the forged path on its record's line
    assert "rejected a wrong bearer token for GET /internal/x\\n2026-12-06" in text_log
    assert not any(line.startswith(FORGED[:19]) for line in text_log.splitlines()), text_log
    assert TOKEN not in text_log
