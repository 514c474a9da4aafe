"""A page fetch's failure, sorted the way a user-facing document shows it.

:func:`fetch_or_fail` fetches one URL and sorts what goes wrong: terminal
(:class:`FetchFailed`, with a short reason: unreachable, redirecting off-host, over 10 MB,
unsupported, disallowed, or an address the guard refused, ``refused: address 10.0.0.1 is
private``, also logged as a WARNING naming the organization) or transient
(:class:`TransientFailure`, retried; on the last attempt its ``reason`` is the one to show).
``Delay`` passes through untouched.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from services.web.fetch import CrawledPage, PageFetch
from services.web.robots import Disallowed
from shared.egress.addresses import AddressRefused, log_refusal
from shared.errors import Delay, Retryable, SpeedtierError, Unrecoverable

UNREACHABLE = "unreachable or redirecting URL"
DISALLOWED = "URL disallowed by robots.txt"
OVERSIZE = "content over 10 MB"
UNSUPPORTED = "unsupported content type"


class FetchFailed(SpeedtierError):
    """A page cannot be had (terminal); ``reason`` is user-facing."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TransientFailure(Retryable):
    """A retryable failure that, on the last attempt, fails the document with ``reason``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def fetch_or_fail(
    url: str, fetch: PageFetch, *, organization_id: int, requested: str
) -> CrawledPage:
    """``fetch(url)``, its failures sorted (see the module docstring).

    Parameters:
      organization_id / requested: who asked, and for which URL; named in the WARNING when
        the SSRF guard refuses an address (``url`` may be a page linked from ``requested``).

    Raises:
      FetchFailed: disallowed, refused, 4xx, too many redirects, oversize, unsupported, or
        redirected to another host.
      TransientFailure: 5xx, connection, DNS, timeouts.
      Delay: the host asked to wait (429 with Retry-After, or the politeness window).
    """
    try:
        page = fetch(url)
    except Disallowed as exc:
        raise FetchFailed(DISALLOWED) from exc
    except (Delay, TransientFailure):
        raise
    except AddressRefused as exc:
        log_refusal(exc, organization_id=organization_id, requested=requested)
        raise FetchFailed(exc.reason) from exc
    except Unrecoverable as exc:
        message = str(exc)
        reason = (
            OVERSIZE
            if "content over" in message
            else UNSUPPORTED
            if "unsupported content type" in message
            else UNREACHABLE
        )
        raise FetchFailed(reason) from exc
    except Retryable as exc:
        raise TransientFailure(str(exc), reason=UNREACHABLE) from exc
    if _host(page.final_url) != _host(url):
        raise FetchFailed(UNREACHABLE)
    return page
