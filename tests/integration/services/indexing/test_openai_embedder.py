"""The OpenAI-compatible embedder against a local server speaking the embeddings protocol."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import redis

from services.indexing.embedders import OpenAICompatibleEmbedder, embedder_from_settings
from shared.errors import Delay, Retryable, Unrecoverable
from testkit.fakes.embeddings_server import (
    INVALID_JSON,
    RATE_LIMITED,
    RATE_LIMITED_NO_RETRY_AFTER,
    SERVER_ERROR,
    SLOW,
    TRUNCATED,
    UNAUTHORIZED,
    WRONG_COUNT,
    EmbeddingsServer,
    running_embeddings_server,
    vector_for,
)
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows

DIMENSIONS = 8
TEXTS = [f"chunk number {i}" for i in range(5)]


@pytest.fixture
def server() -> Iterator[EmbeddingsServer]:
    with running_embeddings_server(dimensions=DIMENSIONS) as state:
        yield state


def make_embedder(server: EmbeddingsServer, **options: object) -> OpenAICompatibleEmbedder:
    settings: dict[str, object] = {
        "base_url": server.base_url,
        "api_key": server.api_key,
        "model": "text-embedding-3-small",
        "dimensions": DIMENSIONS,
        "timeout": 2.0,
    }
    settings.update(options)
    return OpenAICompatibleEmbedder(**settings)  # type: ignore[arg-type]


def test_texts_are_sent_in_batches_and_vectors_come_back_in_order(
    server: EmbeddingsServer,
) -> None:
    embedder = make_embedder(server, batch_size=2)

    vectors = embedder.embed(TEXTS)

    assert server.input_batches == [TEXTS[0:2], TEXTS[2:4], TEXTS[4:5]]
    assert vectors == [vector_for(text, DIMENSIONS) for text in TEXTS]
    request = server.requests[0]
    assert request.path == "/v1/embeddings"
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.payload == {"model": "text-embedding-3-small", "input": TEXTS[0:2]}


def test_vectors_are_ordered_by_index_not_by_position_in_data() -> None:
    with running_embeddings_server(dimensions=DIMENSIONS, reverse_order=True) as server:
        vectors = make_embedder(server, batch_size=10).embed(TEXTS)

    assert vectors == [vector_for(text, DIMENSIONS) for text in TEXTS]


def test_no_texts_send_no_request(server: EmbeddingsServer) -> None:
    assert make_embedder(server).embed([]) == []
    assert server.requests == []


def test_dimensions_are_requested_when_asked(server: EmbeddingsServer) -> None:
    make_embedder(server, request_dimensions=True).embed(["a"])

    assert server.requests[0].payload["dimensions"] == DIMENSIONS


def test_a_wrong_api_key_is_unrecoverable(server: EmbeddingsServer) -> None:
    with pytest.raises(Unrecoverable, match="401"):
        make_embedder(server, api_key="sk-wrong").embed(TEXTS)


def test_a_revoked_key_mid_document_is_unrecoverable(server: EmbeddingsServer) -> None:
    server.fail_next(UNAUTHORIZED)

    with pytest.raises(Unrecoverable):
        make_embedder(server).embed(TEXTS)


def test_429_with_retry_after_delays_without_spending_an_attempt(
    server: EmbeddingsServer,
) -> None:
    server.fail_next(RATE_LIMITED)
    before = time.time()

    with pytest.raises(Delay) as caught:
        make_embedder(server).embed(TEXTS)

    assert caught.value.reason == "retry-after"
    assert before + 7 <= caught.value.until <= time.time() + 7


def test_429_without_retry_after_is_retryable(server: EmbeddingsServer) -> None:
    server.fail_next(RATE_LIMITED_NO_RETRY_AFTER)

    with pytest.raises(Retryable, match="429"):
        make_embedder(server).embed(TEXTS)


def test_a_server_error_is_retryable(server: EmbeddingsServer) -> None:
    server.fail_next(SERVER_ERROR)

    with pytest.raises(Retryable, match="500"):
        make_embedder(server).embed(TEXTS)


def test_a_failure_in_a_later_batch_fails_the_whole_call(server: EmbeddingsServer) -> None:
    embedder = make_embedder(server, batch_size=2)
    server.fail_next(SLOW, SERVER_ERROR)  # the first batch succeeds (slowly), the second fails
    server.slow_seconds = 0.0

    with pytest.raises(Retryable):
        embedder.embed(TEXTS)
    assert len(server.requests) == 2


@pytest.mark.parametrize("failure", [TRUNCATED, INVALID_JSON, WRONG_COUNT])
def test_an_unreadable_or_incomplete_answer_is_retryable(
    server: EmbeddingsServer, failure: str
) -> None:
    server.fail_next(failure)

    with pytest.raises(Retryable):
        make_embedder(server).embed(TEXTS)


def test_a_slow_answer_times_out_as_retryable(server: EmbeddingsServer) -> None:
    server.slow_seconds = 2.0
    server.fail_next(SLOW)
    started = time.monotonic()

    with pytest.raises(Retryable, match="Timeout"):
        make_embedder(server, timeout=0.3).embed(TEXTS)
    assert time.monotonic() - started < 1.5


def test_vectors_of_another_length_are_unrecoverable(server: EmbeddingsServer) -> None:
    with pytest.raises(Unrecoverable, match="dimensions"):
        make_embedder(server, dimensions=DIMENSIONS * 2).embed(TEXTS)


def test_a_full_project_window_delays_to_the_window_end(
    server: EmbeddingsServer, redis_client: redis.Redis, namespace: str
) -> None:
    windows = RateWindows(redis_client, namespace)
    rule = WindowRule(limit=2, period_seconds=60)
    embedder = make_embedder(server, batch_size=1, window=(windows, rule, "project-a"))

    with pytest.raises(Delay) as caught:
        embedder.embed(TEXTS)

    # Two batches went out; the third was held back until the 60-second window ends.
    assert len(server.requests) == 2
    assert caught.value.reason == "window"
    assert time.time() < caught.value.until <= time.time() + 60


def test_the_window_is_shared_per_project_not_per_embedder(
    server: EmbeddingsServer, redis_client: redis.Redis, namespace: str
) -> None:
    windows = RateWindows(redis_client, namespace)
    rule = WindowRule(limit=1, period_seconds=60)
    first = make_embedder(server, window=(windows, rule, "project-a"))
    second = make_embedder(server, window=(windows, rule, "project-a"))
    other_project = make_embedder(server, window=(windows, rule, "project-b"))

    first.embed(["one"])
    with pytest.raises(Delay):
        second.embed(["two"])
    other_project.embed(["three"])

    assert server.input_batches == [["one"], ["three"]]


def test_a_window_admits_again_once_it_has_passed(
    server: EmbeddingsServer, redis_client: redis.Redis, namespace: str
) -> None:
    windows = RateWindows(redis_client, namespace)
    rule = WindowRule(limit=1, period_seconds=0.5)
    embedder = make_embedder(server, window=(windows, rule, "project-a"))
    embedder.embed(["one"])

    try:
        embedder.embed(["two"])
    except Delay as delay:
        time.sleep(max(0.0, delay.until - time.time()) + 0.05)
        embedder.embed(["two"])

    assert server.input_batches[-1] == ["two"]


def test_settings_build_a_working_embedder_with_its_window(
    server: EmbeddingsServer, redis_client: redis.Redis, namespace: str
) -> None:
    settings = SimpleNamespace(
        embedder="openai",
        embedding_api_url=server.base_url,
        embedding_api_key=server.api_key,
        embedding_model="text-embedding-3-small",
        embedding_dimensions=DIMENSIONS,
        embedding_batch_size=3,
        embedding_rate="1/60",
    )

    embedder = embedder_from_settings(settings, windows=RateWindows(redis_client, namespace))

    with pytest.raises(Delay):
        embedder.embed(TEXTS)
    assert server.input_batches == [TEXTS[0:3]]
    assert isinstance(embedder, OpenAICompatibleEmbedder)
    assert embedder.window is not None
    assert server.api_key not in embedder.window[2]  # the key is never part of a Redis key
