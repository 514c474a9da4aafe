"""The cancel point: a job's thread meets ``Cancelled`` at the provider client's next request
(before it is sent), and nothing happens outside a job or once the job is over."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from shared import cancel_point
from shared.errors import Cancelled
from shared.http import JsonClient


class RecordingSession(requests.Session):
    """A session that answers every request 200 ``{}`` and keeps the URLs it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[str] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(str(url))
        response = requests.Response()
        response.status_code = 200
        response._content = b"{}"
        return response


def cancelled() -> None:
    raise Cancelled("cancelled by ann")


def test_a_cancelled_job_stops_before_its_next_provider_request() -> None:
    session = RecordingSession()
    client = JsonClient("https://provider.example", session=session)
    assert client.get("/pages") == {}  # outside a job: no cancel point installed
    cancel_point.install(cancelled)
    try:
        with pytest.raises(Cancelled, match="cancelled by ann"):
            client.get("/pages")
    finally:
        cancel_point.clear()
    assert session.sent == ["https://provider.example/pages"]  # the second was never sent
    assert client.get("/pages") == {}  # the job is over: requests go out again
