"""The API's request class: a body of unknown length is held to the same limit as any other.

Werkzeug enforces ``max_content_length`` (``SPEEDTIER_API_MAX_BODY_BYTES``, or a route's own
limit) on a ``Content-Length`` up front, but on a chunked body (no ``Content-Length``, a
server that terminates the stream, as gunicorn does) it stops reading at the limit and hands
the view the first ``limit`` bytes as if they were the whole body: a JSON prefix followed by
padding was accepted, a longer body silently cut. Here such a body is read up to the limit
and one byte more; when that byte exists the answer is 413, as for a declared length.
"""

from __future__ import annotations

from typing import IO, cast

from flask import Request
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.utils import cached_property
from werkzeug.wsgi import LimitedStream, get_input_stream


class BoundedStream(LimitedStream):
    """A streamed body of at most ``limit`` bytes: reading it whole fails with 413 when
    more follows (werkzeug's own stream ends silently at the limit)."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        super().__init__(stream, limit, is_max=True)
        self._source = stream

    def readall(self) -> bytes:
        data = super().readall()
        if self.is_exhausted and self._source.read(1):
            raise RequestEntityTooLarge()
        return data


class ApiRequest(Request):
    """Flask's request with chunked bodies bounded like declared ones."""

    @cached_property
    def stream(self) -> IO[bytes]:
        if self.shallow:
            raise RuntimeError("a shallow request cannot read its body")
        limit = self.max_content_length
        streamed = self.content_length is None and "wsgi.input_terminated" in self.environ
        if streamed and limit is not None:
            return cast(IO[bytes], BoundedStream(self.environ["wsgi.input"], limit))
        return get_input_stream(self.environ, max_content_length=limit)
