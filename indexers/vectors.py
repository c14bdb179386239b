"""The FAISS index of one stored thread: a local, rebuildable copy of the store's vectors.

FAISS ids are the store's message ids. The file holds one JSON header line (what the
vectors are: store, thread, embedder, generation, count, checksum) and the serialized index,
written to a temporary file and renamed, so a reader sees the old file or the new one.
Opening catches up with messages stored since; a missing, corrupt or stale file is rebuilt
from the store, with a log line. Above `ann_threshold` vectors the index is HNSW.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from .errors import IndexMismatchError
from .index import _faiss
from .store import SQLStore, StoredMessage, check_thread_id

log = logging.getLogger("semhist.vectors")

HNSW_M = 32
HNSW_EF_CONSTRUCTION = 64
# On 1M repeated-LoCoMo vectors (benchmarks/scale.py), recall@10 against exact search was 0.97
# at efSearch 128 and 0.99 at 256, for 0.39 vs 0.42 ms per query: 256 it is.
HNSW_EF_SEARCH = 256


class ThreadVectors:
    def __init__(self, store: SQLStore, thread_id: str, directory: Path, embedder_id: str, dim: int,
                 ann_threshold: int = 50_000):
        self.store = store
        self.thread_id = check_thread_id(thread_id)
        self.embedder_id = embedder_id
        self.dim = dim
        self.ann_threshold = ann_threshold
        key = hashlib.sha256(f"{store.uid}\x00{thread_id}".encode()).hexdigest()[:32]
        self.path = Path(directory) / f"{key}.faiss"
        self.index = None
        self.upto = 0  # highest message id in the index
        self.generation = -1
        self.rebuilt: str | None = None  # why the last open rebuilt the file, if it did

    @property
    def kind(self) -> str:
        return "hnsw" if self.index is not None and self.index.ntotal >= self.ann_threshold else "flat"

    @property
    def size(self) -> int:
        return int(self.index.ntotal) if self.index is not None else 0

    def _empty(self, kind: str):
        faiss = _faiss()
        if kind == "hnsw":
            inner = faiss.IndexHNSWFlat(self.dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            inner.hnsw.efSearch = HNSW_EF_SEARCH
        else:
            inner = faiss.IndexFlatIP(self.dim)
        return faiss.IndexIDMap2(inner)

    def open(self) -> ThreadVectors:
        """Load the file, or rebuild it when it is missing, corrupt or stale; then catch up."""
        self.rebuilt = None
        generation = self.store.generation(self.thread_id)
        problem = self._load(generation)
        if problem:
            self.rebuild(problem)
            return self
        added = self.sync()
        if self.size != self.store.vector_count(self.thread_id):
            self.rebuild(f"it holds {self.size} vectors, the store {self.store.vector_count(self.thread_id)}")
        elif (self.size >= self.ann_threshold) != (self._file_kind == "hnsw"):
            self.rebuild(f"{self.size} vectors call for a {'hnsw' if self.size >= self.ann_threshold else 'flat'} index")
        elif added:
            self.save()
        return self

    def _load(self, generation: int) -> str | None:
        """None when the file was loaded as it is, else why it cannot be used."""
        self._file_kind = "flat"
        try:
            with open(self.path, "rb") as fh:
                header = json.loads(fh.readline())
                body = fh.read()
        except FileNotFoundError:
            return "the file is missing"
        except (OSError, ValueError) as exc:
            return f"the file is unreadable ({exc})"
        if hashlib.sha256(body).hexdigest() != header.get("sha256"):
            return "the file is corrupt (checksum mismatch)"
        expected = {"thread_id": self.thread_id, "embedder": self.embedder_id, "dim": self.dim}
        for key, value in expected.items():
            if header.get(key) != value:
                return f"it was built for {key}={header.get(key)!r}, not {value!r}"
        if header.get("generation") != generation:
            return "messages were forgotten since it was built"
        try:
            self.index = _faiss().deserialize_index(np.frombuffer(body, dtype=np.uint8))
        except RuntimeError as exc:
            return f"FAISS cannot read it ({exc})"
        if self.index.ntotal != header.get("count"):
            return "the file is corrupt (vector count mismatch)"
        self._file_kind = header.get("kind", "flat")
        if self._file_kind == "hnsw":
            _faiss().downcast_index(self.index.index).hnsw.efSearch = HNSW_EF_SEARCH
        self.upto, self.generation = int(header.get("upto", 0)), generation
        return None

    def rebuild(self, reason: str) -> None:
        # A first build is routine; anything else means a file went bad or stale.
        level = logging.INFO if reason == "the file is missing" else logging.WARNING
        log.log(level, "rebuilding the FAISS index of thread %s from the store: %s (%s)", self.thread_id, reason, self.path)
        self.rebuilt = reason
        self.generation = self.store.generation(self.thread_id)
        total = self.store.vector_count(self.thread_id)
        self._file_kind = "hnsw" if total >= self.ann_threshold else "flat"
        self.index = self._empty(self._file_kind)
        self.upto = 0
        self.sync()
        self.save()

    def sync(self) -> int:
        """Add the vectors stored since the index was last brought up to date."""
        if self.index is None:
            self.index = self._empty("flat")
        added = 0
        for ids, vectors in self.store.vectors(self.thread_id, after_id=self.upto):
            if vectors.shape[1] != self.dim:
                raise IndexMismatchError(f"thread {self.thread_id} holds {vectors.shape[1]}-d vectors, the embedder "
                                         f"makes {self.dim}-d ones; run semhist reindex")
            self.index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)
            self.upto = int(ids[-1])
            added += len(ids)
        return added

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, message ids) of the k nearest stored messages, best first."""
        if self.index is None or self.index.ntotal == 0 or k <= 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        scores, ids = self.index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32),
                                        min(k, self.size))
        keep = ids[0] >= 0
        return scores[0][keep], ids[0][keep]

    def attach(self, messages: list[StoredMessage]) -> list[StoredMessage]:
        """The messages with their vectors read back from the index (exact for flat and
        HNSW storage alike); messages the index does not hold (system ones) get none."""
        held = [m for m in messages if m.role != "system"]
        if not held or self.index is None:
            return messages
        keys = np.array([m.id for m in held], dtype=np.int64)
        try:
            vectors = self.index.reconstruct_batch(keys)
        except RuntimeError:  # stored by another writer after our last sync
            self.sync()
            try:
                vectors = self.index.reconstruct_batch(keys)
            except RuntimeError:
                return self.store.messages(self.thread_id, ids=[m.id for m in messages], with_vectors=True)
        by_id = {m.id: v for m, v in zip(held, vectors)}
        return [replace(m, vector=by_id[m.id]) if m.id in by_id else m for m in messages]

    def save(self) -> None:
        body = _faiss().serialize_index(self.index).tobytes()
        header = {"thread_id": self.thread_id, "embedder": self.embedder_id, "dim": self.dim,
                  "generation": self.generation, "count": int(self.index.ntotal), "upto": self.upto,
                  "kind": self._file_kind, "sha256": hashlib.sha256(body).hexdigest()}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(header).encode() + b"\n")
            fh.write(body)
        os.replace(tmp, self.path)

    def drop(self) -> None:
        """Delete the file (after forgetting): the next open rebuilds from what remains."""
        self.index = None
        self.path.unlink(missing_ok=True)
