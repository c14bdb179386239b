"""The one FAISS wrapper: inner-product search over L2-normalized float32 vectors with int64
ids, exact (flat) or approximate (HNSW). FAISS errors surface as BackendError."""

from __future__ import annotations

import threading

import numpy as np

from semhist.kernel.errors import BackendError, ConfigError

FLAT, HNSW = "flat", "hnsw"
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 64
# On 1M repeated-LoCoMo vectors (benchmarks/scale.py), recall@10 against exact search was 0.97
# at efSearch 128 and 0.99 at 256, for 0.39 vs 0.42 ms per query: 256 it is.
HNSW_EF_SEARCH = 256


class _OneBlasThread:
    """numpy's BLAS at one thread while any thread is inside. The first to enter sets it and
    the last to leave puts back the count the process had when this was first used, so
    concurrent asks cannot leave the process's BLAS at the wrong size. Only BLAS builds with
    a process-wide setting (pthreads) are touched: an OpenMP build's count is per thread, and
    setting it from one thread and restoring it from another would leave the first one changed."""

    def __init__(self) -> None:
        self._lock, self._inside, self._libs = threading.Lock(), 0, None

    def _process_wide(self) -> list:
        if self._libs is None:
            from threadpoolctl import ThreadpoolController

            blas = ThreadpoolController().select(user_api="blas").lib_controllers
            self._libs = [(lib, lib.num_threads) for lib in blas
                          if getattr(lib, "threading_layer", None) != "openmp"]
        return self._libs

    def __enter__(self) -> None:
        with self._lock:
            if self._inside == 0:
                for lib, _ in self._process_wide():
                    lib.set_num_threads(1)
            self._inside += 1

    def __exit__(self, *exc) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                for lib, threads in self._process_wide():
                    lib.set_num_threads(threads)


# One BLAS thread for the product: a second one costs more than it saves on a busy 2-core
# machine, and it spins on after the product, slowing everything else the request does.
ONE_BLAS_THREAD = _OneBlasThread()


_SEARCHING = threading.local()


def _one_omp_thread(faiss) -> None:
    """One OpenMP thread for this thread's searches. A search is one query: FAISS's OpenMP team
    only spins beside it on a busy 2-core machine (6,000 vectors: 8.8 ms a search with two
    threads, 1.6 ms with one). OpenMP's thread count is per calling thread, so the background
    builds (HNSW) keep theirs."""
    if not getattr(_SEARCHING, "single", False):
        faiss.omp_set_num_threads(1)
        _SEARCHING.single = True


def faiss_module():
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - core dependency
        raise ConfigError("faiss-cpu is not installed: pip install semhist") from exc
    return faiss


class FaissIndex:
    def __init__(self, dim: int, kind: str = FLAT, index=None):
        faiss = faiss_module()
        self.dim, self.kind = int(dim), kind
        if index is None:
            if kind == HNSW:
                inner = faiss.IndexHNSWFlat(self.dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
                inner.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
                inner.hnsw.efSearch = HNSW_EF_SEARCH
            else:
                inner = faiss.IndexFlatIP(self.dim)
            index = faiss.IndexIDMap2(inner)
        self._index = index

    @property
    def size(self) -> int:
        return int(self._index.ntotal)

    @property
    def nbytes(self) -> int:
        per = self.dim * 4 + (2 * HNSW_M * 4 if self.kind == HNSW else 0) + 16  # vector, links, id maps
        return self.size * per

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        if not len(ids):
            return
        vectors = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(ids), -1)
        if vectors.shape[1] != self.dim:
            raise BackendError(f"a {vectors.shape[1]}-d vector cannot join a {self.dim}-d index")
        try:
            self._index.add_with_ids(vectors, np.ascontiguousarray(ids, dtype=np.int64))
        except RuntimeError as exc:
            raise BackendError(f"FAISS could not add vectors: {exc}") from exc

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids) of the k nearest vectors, best first; k is capped at the size."""
        k = min(int(k), self.size)
        if k <= 0:
            return np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        _one_omp_thread(faiss_module())
        try:
            scores, ids = self._index.search(np.ascontiguousarray(query.reshape(1, -1), dtype=np.float32), k)
        except RuntimeError as exc:
            raise BackendError(f"FAISS search failed: {exc}") from exc
        keep = ids[0] >= 0
        return scores[0][keep], ids[0][keep]

    def scores_all(self, query: np.ndarray) -> np.ndarray:
        """The inner product with every vector, in the order they were added (flat only):
        one matrix-vector product over FAISS's own storage, no copy, no sort."""
        if self.kind != FLAT:
            raise BackendError("scores_all needs a flat index")
        n = self.size
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        faiss = faiss_module()
        inner = faiss.downcast_index(self._index.index)
        matrix = np.asarray(faiss.rev_swig_ptr(inner.get_xb(), n * self.dim)).reshape(n, self.dim)
        with ONE_BLAS_THREAD:
            return matrix @ np.asarray(query, dtype=np.float32).reshape(-1)

    def ids(self) -> np.ndarray:
        """The ids held, in the order they were added."""
        return faiss_module().vector_to_array(self._index.id_map).astype(np.int64)

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors of these ids (KeyError when one is not held)."""
        if not len(ids):
            return np.zeros((0, self.dim), dtype=np.float32)
        try:
            return self._index.reconstruct_batch(np.ascontiguousarray(ids, dtype=np.int64))
        except RuntimeError as exc:
            raise KeyError(f"the index does not hold some of these ids: {exc}") from None

    def serialize(self) -> bytes:
        try:
            return faiss_module().serialize_index(self._index).tobytes()
        except RuntimeError as exc:
            raise BackendError(f"FAISS could not serialize the index: {exc}") from exc

    @classmethod
    def deserialize(cls, data: bytes, dim: int, kind: str) -> FaissIndex:
        """Raises ValueError when the bytes are not a FAISS index of that shape."""
        faiss = faiss_module()
        try:
            index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        except RuntimeError as exc:
            raise ValueError(f"FAISS cannot read it ({exc})") from None
        if int(index.d) != dim:
            raise ValueError(f"it holds {index.d}-d vectors, not {dim}-d")
        if kind == HNSW:
            faiss.downcast_index(index.index).hnsw.efSearch = HNSW_EF_SEARCH
        return cls(dim, kind, index)
