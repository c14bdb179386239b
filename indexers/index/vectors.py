"""The FAISS index of one long stored thread: a local, rebuildable copy of the store's vectors.

FAISS ids are the store's message ids. The file holds one JSON header line (which store,
thread incarnation and generation, embedder, count, checksum) and the serialized index; it is
written to a temporary file and renamed, under a lock that forgetting takes too, and only
while the store still holds what the file would contain. Opening catches up with messages
stored since. Anything slow (a rebuild from the store, the switch to HNSW when the thread
passes `ann_threshold`, a long catch-up) runs in the background: searches meanwhile use the
index as it stands (the exact flat one while HNSW is built).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from semhist.kernel.errors import IndexMismatchError, SemhistError
from semhist.kernel.ids import check_thread_id

from ..store import Marker, StoreReader
from .faiss_index import FLAT, HNSW, FaissIndex

log = logging.getLogger("semhist.vectors")
INLINE_SYNC = 5_000  # vectors a search may wait to have added; more are added in the background
BATCH = 20_000


class ThreadVectors:
    def __init__(self, store: StoreReader, thread_id: str, directory: Path, embedder_id: str, dim: int,
                 ann_threshold: int = 50_000, submit: Callable | None = None):
        self.store, self.thread_id = store, check_thread_id(thread_id)
        self.embedder_id, self.dim, self.ann_threshold = embedder_id, dim, ann_threshold
        key = hashlib.sha256(f"{store.uid}\x00{thread_id}".encode()).hexdigest()[:32]
        self.path = Path(directory) / f"{key}.faiss"
        self._submit = submit or (lambda fn: fn())  # no executor: do the work in place
        self._lock = threading.RLock()
        self.index: FaissIndex | None = None
        self.upto = 0  # highest message id in the index
        self.marker: Marker | None = None  # the thread state the index holds
        self.rebuilt: str | None = None  # why the index was last rebuilt, if it was
        self._busy: threading.Event | None = None  # set when background work is done
        self.error: SemhistError | None = None

    # -- state ---------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self.index.size if self.index is not None else 0

    @property
    def kind(self) -> str:
        return self.index.kind if self.index is not None else FLAT

    @property
    def ready(self) -> bool:
        return self._busy is None

    @property
    def nbytes(self) -> int:
        return self.index.nbytes if self.index is not None else 0

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for background work; True when none is left."""
        busy = self._busy
        return busy is None or busy.wait(timeout)

    # -- opening and catching up -----------------------------------------------------------
    def open(self, marker: Marker) -> ThreadVectors:
        """Load the file, or rebuild it when it is missing, corrupt or stale; then catch up."""
        problem = self._load(marker)
        if problem:
            self._rebuild(problem, marker)
        else:
            self.catch_up(marker)
        return self

    def catch_up(self, marker: Marker) -> None:
        """Bring the index to `marker`: add what was appended, rebuild after a forget, and
        switch to HNSW in the background once the thread is large enough."""
        if self._busy is not None:
            return  # the background work catches up when it finishes
        if self.index is None or not marker.same_lineage(self.marker):
            self.drop()
            self._rebuild("messages were forgotten or re-embedded since it was built", marker)
            return
        if marker.vectors - self.size > INLINE_SYNC:
            self._background(lambda: self._sync(marker))
            return
        self._sync(marker)
        if self.kind == FLAT and self.size >= self.ann_threshold:
            self._background(self._to_hnsw)

    def _sync(self, marker: Marker) -> int:
        added = 0
        for ids, vectors in self.store.vectors(self.thread_id, after_id=self.upto, batch=BATCH):
            if vectors.shape[1] != self.dim:
                raise IndexMismatchError(f"thread {self.thread_id} holds {vectors.shape[1]}-d vectors, the embedder "
                                         f"makes {self.dim}-d ones; run semhist reindex")
            with self._lock:
                self.index.add(ids, vectors)
                self.upto = int(ids[-1])
            added += len(ids)
        self.marker = marker
        return added

    def add(self, ids: np.ndarray, vectors: np.ndarray, marker: Marker) -> None:
        """Vectors this process just stored, when nothing else was written since the index
        was last brought up to date (else `catch_up` reads what it missed)."""
        if self._busy is not None or self.index is None or not marker.same_lineage(self.marker):
            return
        with self._lock:
            fresh = ids > self.upto
            self.index.add(ids[fresh], vectors[fresh])
            if fresh.any():
                self.upto = int(ids[fresh][-1])
            self.marker = marker

    # -- reading -------------------------------------------------------------------------
    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, message ids) of the k nearest stored messages, best first."""
        with self._lock:
            if self.index is None:
                return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
            return self.index.search(query, k)

    def vectors_of(self, ids: list[int]) -> dict[int, np.ndarray]:
        """Vectors of the ids the index holds (exact for flat and HNSW storage alike)."""
        with self._lock:
            if self.index is None or not ids:
                return {}
            held = [i for i in ids if i <= self.upto]
            try:
                return dict(zip(held, self.index.reconstruct(np.array(held, dtype=np.int64))))
            except KeyError:  # some were never indexed: take the others one by one
                out = {}
                for i in held:
                    try:
                        out[i] = self.index.reconstruct(np.array([i], dtype=np.int64))[0]
                    except KeyError:
                        continue
                return out

    # -- background work -----------------------------------------------------------------
    def _background(self, work: Callable[[], None]) -> None:
        done = self._busy = threading.Event()

        def run() -> None:
            try:
                work()
                self.error = None
            except SemhistError as exc:
                self.error = exc
                log.warning("building the FAISS index of thread %s failed: %s", self.thread_id, exc)
            finally:
                self._busy = None
                done.set()
        self._submit(run)

    def _rebuild(self, reason: str, marker: Marker) -> None:
        # A first build is routine; anything else means a file went bad or stale.
        level = logging.INFO if reason == "the file is missing" else logging.WARNING
        log.log(level, "rebuilding the FAISS index of thread %s from the store: %s (%s)", self.thread_id, reason,
                self.path)
        self.rebuilt = reason
        target = HNSW if marker.vectors >= self.ann_threshold else FLAT
        with self._lock:  # a flat index fills in place and answers meanwhile; HNSW answers when done
            self.index = FaissIndex(self.dim) if target == FLAT else None
            self.upto, self.marker = 0, marker

        def build() -> None:
            if target == HNSW:
                fresh = FaissIndex(self.dim, HNSW)
                upto = 0
                for ids, vectors in self.store.vectors(self.thread_id, batch=BATCH):
                    fresh.add(ids, vectors)
                    upto = int(ids[-1])
                with self._lock:
                    self.index, self.upto = fresh, upto
            self._sync(self.store.marker(self.thread_id) or marker)
            self.save()
        self._background(build)

    def _to_hnsw(self) -> None:
        log.info("thread %s passed %d vectors: building its HNSW index in the background", self.thread_id,
                 self.ann_threshold)
        with self._lock:
            flat = self.index
            ids = np.sort(flat.ids())
        # appends meanwhile wait in the store; the next catch-up adds them (upto stays)
        fresh = FaissIndex(self.dim, HNSW)
        for start in range(0, len(ids), BATCH):
            chunk = ids[start:start + BATCH]
            with self._lock:
                vectors = flat.reconstruct(chunk)
            fresh.add(chunk, vectors)
        with self._lock:
            self.index = fresh
        self.save()

    # -- the file ------------------------------------------------------------------------
    def _load(self, marker: Marker) -> str | None:
        """None when the file was loaded as it is, else why it cannot be used."""
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
        expected = {"thread_id": self.thread_id, "embedder": self.embedder_id, "dim": self.dim,
                    "thread_uid": marker.uid, "generation": marker.generation}
        for key, value in expected.items():
            if header.get(key) != value:
                return f"it was built for {key}={header.get(key)!r}, not {value!r}"
        try:
            index = FaissIndex.deserialize(body, self.dim, header.get("kind", FLAT))
        except ValueError as exc:
            return str(exc)
        if index.size != header.get("count"):
            return "the file is corrupt (vector count mismatch)"
        with self._lock:
            self.index, self.upto = index, int(header.get("upto", 0))
            self.marker = Marker(marker.uid, marker.generation, -1)
        return None

    @contextmanager
    def _file_lock(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def save(self) -> None:
        """Write the file, unless the store moved on (then it would hold forgotten vectors)."""
        with self._lock:
            if self.index is None or self.marker is None:
                return
            body, upto, kind, count = self.index.serialize(), self.upto, self.index.kind, self.index.size
        header = {"thread_id": self.thread_id, "thread_uid": self.marker.uid, "generation": self.marker.generation,
                  "embedder": self.embedder_id, "dim": self.dim, "count": count, "upto": upto, "kind": kind,
                  "sha256": hashlib.sha256(body).hexdigest()}
        with self._file_lock():
            if not self.marker.same_lineage(self.store.marker(self.thread_id)):
                return
            tmp = self.path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            with open(tmp, "wb") as fh:
                fh.write(json.dumps(header).encode() + b"\n")
                fh.write(body)
            os.replace(tmp, self.path)

    def drop(self) -> None:
        """Delete the file (after forgetting): the next open rebuilds from what remains."""
        with self._lock:
            self.index, self.marker, self.upto = None, None, 0
        with self._file_lock():
            self.path.unlink(missing_ok=True)
