"""No HTTP client is built outside the egress guard (``shared.egress.session``): a bare
``requests``/``httpx``/``urllib3`` client in production code would connect wherever a name
resolves, unchecked.

Allowed elsewhere, by name and for a reason:

* ``services/rails/client.py``: Rails' ``/internal/*`` endpoints, at ``RAILS_INTERNAL_URL``,
  which only the operator sets and which is a private cluster address by design.
* ``services/app/demo/client.py`` and ``services/app/demo/website.py``: the demo's own
  client of the local API and walker of the bundled demo site, both on loopback.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION = ("shared", "tiers", "router", "services")
ALLOWED = {
    "shared/egress/session.py",
    "services/rails/client.py",
    "services/app/demo/client.py",
    "services/app/demo/website.py",
}
#: module -> names that make a client or send a request.
CLIENTS = {
    "requests": {"get", "post", "put", "patch", "delete", "head", "options", "request", "Session"},
    "requests.sessions": {"Session"},
    "requests.api": {"get", "post", "put", "patch", "delete", "head", "options", "request"},
    "httpx": {"get", "post", "put", "patch", "delete", "head", "options", "request", "stream"}
    | {"Client", "AsyncClient"},
    "urllib3": {"PoolManager", "HTTPConnectionPool", "HTTPSConnectionPool", "request"},
    "urllib.request": {"urlopen", "build_opener"},
    "http.client": {"HTTPConnection", "HTTPSConnection"},
}


def parse(source: str) -> ast.Module:
    """``ast.parse``, tried again on CPython 3.11's "AST constructor recursion depth
    mismatch": a ``SystemError`` it raises when another thread of the process compiles at the
    same time (a module imported in a thread a test left running), not a fault of the
    source."""
    for _ in range(3):
        try:
            return ast.parse(source)
        except SystemError as error:
            if "recursion depth mismatch" not in str(error):
                raise
    return ast.parse(source)


def bare_clients(source: str) -> list[str]:
    """``module.name`` of every bare client call or import in ``source``."""
    found: list[str] = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in CLIENTS:
            found += [
                f"{node.module}.{a.name}" for a in node.names if a.name in CLIENTS[node.module]
            ]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            module = ast.unparse(node.func.value)
            if node.func.attr in CLIENTS.get(module, ()):
                found.append(f"{module}.{node.func.attr}")
    return found


def production_files() -> list[Path]:
    return sorted(p for package in PRODUCTION for p in (ROOT / package).rglob("*.py"))


def test_no_bare_http_client_outside_the_egress_guard() -> None:
    offenders = {
        str(path.relative_to(ROOT)): clients
        for path in production_files()
        if str(path.relative_to(ROOT)) not in ALLOWED
        and (clients := bare_clients(path.read_text()))
    }

    assert offenders == {}


def test_the_allow_list_names_files_that_exist() -> None:
    assert all((ROOT / name).is_file() for name in ALLOWED)


@pytest.mark.parametrize(
    "source",
    [
        "import requests\nrequests.get('http://169.254.169.254/')",
        "import requests\ns = requests.Session()",
        "from requests import Session",
        "import httpx\nhttpx.Client()",
        "from httpx import AsyncClient",
        "import urllib3\nurllib3.PoolManager()",
        "import urllib.request\nurllib.request.urlopen('http://x/')",
    ],
)
def test_the_scan_sees_each_way_of_building_a_client(source: str) -> None:
    assert bare_clients(source)
