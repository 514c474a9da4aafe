"""A WSGI app for the thread loop's tests: ``/fast`` answers at once, ``/slow?s=N`` after N
seconds, ``/pid`` with the serving worker's pid."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/slow":
        time.sleep(float(parse_qs(environ.get("QUERY_STRING", ""))["s"][0]))
    body = str(os.getpid()).encode() if path == "/pid" else b"ok"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
