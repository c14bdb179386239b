"""Embedding cache keyed by content hash and embedder id, in one SQLite file."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .errors import BackendError

_SCHEMA = "CREATE TABLE IF NOT EXISTS embeddings (key BLOB PRIMARY KEY, vector BLOB NOT NULL)"
_CHUNK = 500  # SQLite's bound-parameter limit is far above this on every build we know


def cache_key(embedder_id: str, kind: str, text: str) -> bytes:
    return hashlib.sha256(f"{embedder_id}\x00{kind}\x00{text}".encode()).digest()


class EmbeddingCache:
    """get/put float32 vectors; a missing or unwritable file degrades to memory only."""

    def __init__(self, path: Path | None):
        self._memory: dict[bytes, np.ndarray] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(str(path), check_same_thread=False)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute(_SCHEMA)
                self._db.commit()
            except sqlite3.Error as exc:
                raise BackendError(f"cannot open the embedding cache {path}: {exc}") from exc

    def get_many(self, keys: Sequence[bytes], dim: int) -> dict[bytes, np.ndarray]:
        found = {k: self._memory[k] for k in keys if k in self._memory}
        missing = [k for k in keys if k not in found]
        if self._db is None or not missing:
            return found
        with self._lock:
            for start in range(0, len(missing), _CHUNK):
                chunk = missing[start:start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", chunk)
                for key, blob in rows:
                    vec = np.frombuffer(blob, dtype=np.float32)
                    if vec.shape == (dim,):
                        found[key] = self._memory[key] = vec
        return found

    def put_many(self, items: dict[bytes, np.ndarray]) -> None:
        self._memory.update(items)
        if self._db is None or not items:
            return
        with self._lock:
            self._db.executemany(
                "INSERT OR REPLACE INTO embeddings (key, vector) VALUES (?, ?)",
                [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()],
            )
            self._db.commit()

    def delete_many(self, keys: Sequence[bytes]) -> None:
        """Erase cached vectors (forgetting a message erases what was derived from it)."""
        for k in keys:
            self._memory.pop(k, None)
        if self._db is None or not keys:
            return
        with self._lock:
            self._db.executemany("DELETE FROM embeddings WHERE key = ?", [(k,) for k in keys])
            self._db.commit()

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
