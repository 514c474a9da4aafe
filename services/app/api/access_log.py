"""gunicorn's access log without credentials, one request per line.

=======================================  =================================================
atom                                     logged as
=======================================  =================================================
``%(u)s`` (the Basic-auth user name,     ``-``: with ``curl -u "$TOKEN:"`` it is the token
the token for ``curl -u "$TOKEN:"``)
``%({authorization}i)s``,                ``-``: credentials, whatever the format asks for
``%({cookie}i)s``, ``%({x-api-key}i)s``,
``%({set-cookie}o)s``
every other value (request line,         control characters escaped
referer, user agent, headers)            (``shared.observability.escape_controls``)
=======================================  =================================================

gunicorn's error log (a refused request line, a worker's traceback) is escaped the same way
(``shared.observability.EscapedText`` in gunicorn's own line format).

gunicorn's parser already refuses CR, LF and NUL in header values, but lets other control
characters through (an escape sequence in a ``User-Agent`` would reach the terminal that
tails the log).
"""

from __future__ import annotations

from typing import Any

from gunicorn.glogging import Logger

from shared.observability import EscapedText, escape_controls

#: gunicorn's default line without ``%(u)s``; no atom of it names a credential.
ACCESS_LOG_FORMAT = '%(h)s - %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(M)sms'
#: Atoms never logged, lower case (gunicorn looks atoms up case-insensitively).
SECRET_ATOMS = frozenset(
    {
        "u",
        "{authorization}i",
        "{proxy-authorization}i",
        "{cookie}i",
        "{x-api-key}i",
        "{set-cookie}o",
        "{http_authorization}e",
        "{http_proxy_authorization}e",
        "{http_cookie}e",
        "{http_x_api_key}e",
    }
)


class AccessLog(Logger):  # type: ignore[misc]
    """gunicorn's logger whose access atoms carry no credential and no control character,
    and whose error log lines are escaped."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for handler in self.error_log.handlers:
            handler.setFormatter(EscapedText(self.error_fmt, self.datefmt))

    def atoms(self, resp: Any, req: Any, environ: Any, request_time: Any) -> dict[str, Any]:
        found: dict[str, Any] = super().atoms(resp, req, environ, request_time)
        return {
            name: "-"
            if name.lower() in SECRET_ATOMS
            else escape_controls(value)
            if isinstance(value, str)
            else value
            for name, value in found.items()
        }
