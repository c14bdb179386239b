"""Embedding cache keyed by content hash and embedder id, in one SQLite file, with a small
bounded copy in memory (a service embeds a new query on every request)."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from semhist.kernel.errors import BackendError

_SCHEMA = "CREATE TABLE IF NOT EXISTS embeddings (key BLOB PRIMARY KEY, vector BLOB NOT NULL)"
_CHUNK = 500  # SQLite's bound-parameter limit is far above this on every build we know
MEMORY_ENTRIES = 1024


def cache_key(embedder_id: str, kind: str, text: str) -> bytes:
    return hashlib.sha256(f"{embedder_id}\x00{kind}\x00{text}".encode()).digest()


class EmbeddingCache:
    """get/put float32 vectors in a SQLite file (None: memory only)."""

    def __init__(self, path: Path | None, memory_entries: int = MEMORY_ENTRIES):
        self.path = path
        self._memory: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self._limit = memory_entries
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=60)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # a cache: losing the last writes costs a re-embed
                self._db.execute("PRAGMA secure_delete=ON")  # a forgotten text's vector is overwritten
                self._db.execute(_SCHEMA)
                self._db.commit()
            except (OSError, sqlite3.Error) as exc:
                raise BackendError(f"cannot open the embedding cache {path}: {exc}") from exc

    def _remember(self, key: bytes, vector: np.ndarray) -> None:
        self._memory[key] = vector
        self._memory.move_to_end(key)
        while len(self._memory) > self._limit:
            self._memory.popitem(last=False)

    def get_many(self, keys: Sequence[bytes], dim: int) -> dict[bytes, np.ndarray]:
        with self._lock:
            found = {k: self._memory[k] for k in keys if k in self._memory}
            missing = [k for k in keys if k not in found]
            if self._db is None or not missing:
                return found
            try:
                for start in range(0, len(missing), _CHUNK):
                    chunk = missing[start:start + _CHUNK]
                    marks = ",".join("?" * len(chunk))
                    rows = self._db.execute(f"SELECT key, vector FROM embeddings WHERE key IN ({marks})", chunk)
                    for key, blob in rows:
                        vec = np.frombuffer(blob, dtype=np.float32)
                        if vec.shape == (dim,):
                            found[key] = vec
                            self._remember(key, vec)
            except sqlite3.Error as exc:
                raise BackendError(f"embedding cache {self.path}: {exc}") from exc
        return found

    def put_many(self, items: dict[bytes, np.ndarray]) -> None:
        with self._lock:
            for key, vector in items.items():
                self._remember(key, vector)
            if self._db is None or not items:
                return
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings (key, vector) VALUES (?, ?)",
                    [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()])
                self._db.commit()
            except sqlite3.Error as exc:
                raise BackendError(f"embedding cache {self.path}: {exc}") from exc

    def delete_many(self, keys: Sequence[bytes]) -> None:
        """Erase cached vectors (forgetting a message erases what was derived from it)."""
        with self._lock:
            for k in keys:
                self._memory.pop(k, None)
            if self._db is None or not keys:
                return
            try:
                self._db.executemany("DELETE FROM embeddings WHERE key = ?", [(k,) for k in keys])
                self._db.commit()
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as exc:
                raise BackendError(f"embedding cache {self.path}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
