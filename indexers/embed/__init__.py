"""Embedders behind one small protocol, a registry by name, and a content-hash cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Protocol

import numpy as np

from semhist.kernel.errors import BackendError, ConfigError
from .cache import EmbeddingCache, cache_key
from .models import PASSAGE, QUERY, E5SmallEmbedder, SentenceTransformerEmbedder, UseM3Embedder

__all__ = ["EMBEDDERS", "PASSAGE", "QUERY", "CachedEmbedder", "Embedder", "EmbeddingCache", "cache_key",
           "get_embedder"]


class Embedder(Protocol):
    """Turns texts into L2-normalized float32 rows. `id` names the model exactly."""

    id: str
    dim: int

    def embed(self, texts: Sequence[str], kind: str = PASSAGE) -> np.ndarray: ...


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
            vectors = embed_or_fail(self.inner, [texts[i] for i in batch], kind)
            fresh = {keys[i]: vectors[j] for j, i in enumerate(batch)}
            self.cache.put_many(fresh)
            found.update(fresh)
            if progress:
                progress(len(batch))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, key in enumerate(keys):
            out[i] = found[key]
        return out


# The packaged encoders read a few hundred tokens; longer inputs cost memory in proportion
# (USE-m3: about 10 MB per 1,000 Japanese characters, 3 GB for a 1 MB message) and add little.
# A long text is embedded as the mean of at most MAX_CHUNKS chunks spread over it, a few at a time.
CHUNK_CHARS = 2_000
MAX_CHUNKS = 32
CHUNK_BATCH = 4


def chunks_of(text: str) -> list[str]:
    """A long text's chunks (the whole text when it is short), evenly spread over it."""
    if len(text) <= CHUNK_CHARS:
        return [text]
    starts = range(0, len(text), CHUNK_CHARS)
    if len(starts) > MAX_CHUNKS:
        step = len(starts) / MAX_CHUNKS
        starts = [starts[int(k * step)] for k in range(MAX_CHUNKS)]
    return [text[s:s + CHUNK_CHARS] for s in starts]


def embed_or_fail(embedder: Embedder, texts: Sequence[str], kind: str = PASSAGE) -> np.ndarray:
    """The embedder's rows (long texts chunked), its failures as a BackendError naming it."""
    texts = list(texts)
    long = [i for i, t in enumerate(texts) if len(t) > CHUNK_CHARS]
    try:
        if not long:
            return embedder.embed(texts, kind)
        out = np.zeros((len(texts), embedder.dim), dtype=np.float32)
        short = [i for i, t in enumerate(texts) if len(t) <= CHUNK_CHARS]
        if short:
            out[short] = embedder.embed([texts[i] for i in short], kind)
        for i in long:
            pieces = chunks_of(texts[i])
            total = np.zeros(embedder.dim, dtype=np.float32)
            for start in range(0, len(pieces), CHUNK_BATCH):
                total += embedder.embed(pieces[start:start + CHUNK_BATCH], kind).sum(axis=0)
            out[i] = total / max(float(np.linalg.norm(total)), 1e-12)
        return out
    except Exception as exc:
        raise BackendError(f"embedder {embedder.id} failed: {exc}") from exc
