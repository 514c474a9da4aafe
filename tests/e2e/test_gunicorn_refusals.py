"""gunicorn's own refusals (an over-long request line, malformed headers) answered in JSON by
:class:`services.app.api.gunicorn_worker.JsonErrorsWorker`, with the real app behind it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.ports import free_port

REPO = Path(__file__).resolve().parents[2]
TOKEN = "secret"


def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` as is; the status, headers and body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, body


def serving(port: int) -> bool:
    try:
        status, _, _ = exchange(
            port, b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
    except OSError:
        return False
    return status == 200


@pytest.fixture
def server(redis_url: str, database_url: str, namespace: str) -> Iterator[int]:
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "test",
        "INTERNAL_API_TOKEN": TOKEN,
    }
    # The real command: `speedtier api` must run the JSON-refusing worker class.
    command = [
        sys.executable, "-m", "services.app.cli", "api",
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--threads", "2",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not serving(port):
            assert process.poll() is None, process.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "gunicorn did not start"
            time.sleep(0.1)
        yield port
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=40)


@pytest.mark.slow
def test_requests_gunicorn_refuses_are_answered_in_json(server: int) -> None:
    long_path = "/knowledge-bases?" + "x" * 5000
    line, headers, body = exchange(server, f"GET {long_path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    assert line == 414
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body)["error"] == "uri_too_long"

    status, headers, body = exchange(server, b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")
    assert status == 400
    assert headers["Content-Type"] == "application/json"
    refused = json.loads(body)
    assert refused["error"] == "invalid_request"
    assert "Bad Header" in refused["fields"]["request"]

    # Everything else still reaches the app.
    status, _, body = exchange(
        server, b"GET /knowledge-bases HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    assert status == 401
    assert json.loads(body)["error"] == "unauthorized"
