"""A local Slack Web API speaking ``chat.postMessage`` as Slack documents it.

References (read for this fake):

- https://api.slack.com/methods/chat.postMessage (docs.slack.dev/reference/methods/
  chat.postMessage): ``POST /api/chat.postMessage``, JSON or form body, the token as
  ``Authorization: Bearer``; ``channel`` required, ``text`` and/or ``blocks``; the answer
  ``{"ok": true, "channel", "ts", "message"}``; errors such as ``not_authed``,
  ``invalid_auth``, ``channel_not_found``, ``no_text``, ``invalid_blocks``.
- https://api.slack.com/web (docs.slack.dev/apis/web-api): every answer is HTTP 200 with
  ``"ok"``; a failure is ``{"ok": false, "error": "<code>"}``.
- https://api.slack.com/docs/rate-limits (docs.slack.dev/apis/web-api/rate-limits): a
  throttled call is HTTP 429 with ``Retry-After`` seconds and ``{"ok": false, "error":
  "ratelimited"}``.
- https://api.slack.com/reference/block-kit/blocks: a message holds at most 50 blocks
  (more is ``invalid_blocks``), a section's text at most 3,000 characters.

Failure injection comes from :class:`~testkit.fakes.protocol_server.ProtocolServer`:
``"500"`` answers HTTP 500, ``"429"`` with ``retry_after`` a rate limit, ``"slow"`` answers
(and posts the message) only after the client has given up: a message that landed although
its sender saw a timeout. :meth:`SlackServer.reject` makes the next posts answer ``ok:
false`` with a given error. :attr:`SlackServer.messages` holds what really landed.
"""

from __future__ import annotations

import time
from typing import Any

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request

POST_MESSAGE = "/api/chat.postMessage"
MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000


class SlackServer(ProtocolServer):
    """Parameters:
    token: the bot token requests must carry.
    channels: channel ids (or names) that exist.
    """

    def __init__(self, token: str = "xoxb-test", channels: tuple[str, ...] = ("C0REPORTS",)):
        super().__init__()
        self.token = token
        self.channels = set(channels)
        #: Every message that landed: the request body plus its ``ts``.
        self.messages: list[dict[str, Any]] = []
        self._rejections: list[str] = []
        self._ts = time.time()

    def reject(self, error: str, times: int = 1) -> None:
        """Answer the next ``times`` posts ``{"ok": false, "error": error}`` (HTTP 200)."""
        with self._lock:
            self._rejections.extend([error] * times)

    def authorized(self, request: Request) -> bool:
        return True  # Slack answers 200 ``not_authed``/``invalid_auth``, not 401: see route

    def status_reply(self, status: int, message: str) -> Reply:
        error = "ratelimited" if status == 429 else "internal_error"
        return Reply(status, {"ok": False, "error": error, "detail": message})

    def route(self, request: Request) -> Reply:
        if request.path != POST_MESSAGE or request.method != "POST":
            return Reply(404, {"ok": False, "error": "unknown_method"})
        auth = request.headers.get("authorization", "")
        if not auth:
            return _error("not_authed")
        if auth != f"Bearer {self.token}":
            return _error("invalid_auth")
        body = request.body if isinstance(request.body, dict) else {}
        with self._lock:
            if self._rejections:
                return _error(self._rejections.pop(0))
        channel = body.get("channel")
        if channel not in self.channels:
            return _error("channel_not_found")
        blocks = body.get("blocks")
        if not body.get("text") and not blocks:
            return _error("no_text")
        if blocks is not None and not _valid_blocks(blocks):
            return _error("invalid_blocks")
        with self._lock:
            self._ts += 1
            ts = f"{self._ts:.6f}"
            self.messages.append({**body, "ts": ts})
        message = {"type": "message", "text": body.get("text", ""), "ts": ts, "bot_id": "B0FAKE"}
        return Reply(200, {"ok": True, "channel": channel, "ts": ts, "message": message})


def _error(code: str) -> Reply:
    return Reply(200, {"ok": False, "error": code})


def _valid_blocks(blocks: Any) -> bool:
    if not isinstance(blocks, list) or not 0 < len(blocks) <= MAX_BLOCKS:
        return False
    for block in blocks:
        if not isinstance(block, dict) or "type" not in block:
            return False
        text = block.get("text")
        if isinstance(text, dict) and len(str(text.get("text", ""))) > MAX_SECTION_TEXT:
            return False
    return True
