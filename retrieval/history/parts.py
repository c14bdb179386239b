"""What a `History` wires together: the store, the LLM, the embedder, the segmenter, the write
path, the query path, compaction and the per-thread states. Each is made on first use:
opening a store or loading the embedder costs time that a command such as `semhist threads`
does not need."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from typing import Any

from semhist.indexers.embed import CachedEmbedder, EmbeddingCache, get_embedder
from semhist.indexers.index import manifest as manifests
from semhist.indexers.index.vectors import ThreadVectors
from semhist.indexers.ingest import Ingestor
from semhist.indexers.segment import get_segmenter
from semhist.indexers.store import SQLStore, open_store
from semhist.kernel.settings import Settings

from ..llm import LLMClient, make_llm
from ..memory import Memory
from ..pipeline import Asker
from .files import Known
from .states import ThreadStates


class Parts:
    def __init__(self, settings: Settings, *, store: SQLStore | None = None,
                 llm: LLMClient | None | str = "auto", cache_writes: bool = False, add_threads: bool = True):
        self.settings = settings
        self.add_threads = add_threads  # False: Thread objects only if stored (a saved index)
        self.known = Known()  # Thread objects already stored, by fingerprint
        self.own_store = store is None  # a store we opened is ours to close
        self._store, self._llm_arg = store, llm
        self._cache_writes = cache_writes  # files: vectors of what is stored go to the embedding cache too

    @cached_property
    def store(self) -> SQLStore:
        return self._store or open_store(self.settings.db_url)

    @cached_property
    def llm(self) -> LLMClient | None:
        return make_llm(self.settings.llm) if self._llm_arg == "auto" else self._llm_arg  # type: ignore[return-value]

    @cached_property
    def embedder(self) -> CachedEmbedder:
        """Embeds requests (and, for files, messages) through the content-hash cache. Only
        files keep it on disk: a bot's requests are new every time, and writing each one to a
        file all processes share made every ask of a service wait for the others' writes."""
        path = self.settings.cache_dir / "embeddings.sqlite3" if self._cache_writes else None
        return CachedEmbedder(get_embedder(self.settings.embedder), EmbeddingCache(path))

    @cached_property
    def segmenter(self):
        return get_segmenter(self.settings.segmenter, **self.settings.segment_params)

    @cached_property
    def ingestor(self) -> Ingestor:
        s = self.settings
        # The store keeps every vector of a stored thread, so its writes skip the embedding
        # cache: forgetting then has one place to erase.
        embedder = self.embedder if self._cache_writes else get_embedder(s.embedder)
        return Ingestor(self.store, embedder, self.segmenter, s.pii, s.batch_size)

    @cached_property
    def asker(self) -> Asker:
        return Asker(self.settings, self.embedder, self.llm)

    @cached_property
    def memory(self) -> Memory:
        return Memory(self.store, self.llm, self.settings)

    @cached_property
    def executor(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="semhist-index")

    @cached_property
    def states(self) -> ThreadStates:
        s = self.settings
        return ThreadStates(self.store, self.embedder.dim, self.segmenter, s.view_limit, self.thread_vectors,
                            s.cache_threads, s.cache_mb * 2**20, submit=self.executor.submit)

    def thread_vectors(self, thread_id: str) -> ThreadVectors:
        s = self.settings
        return ThreadVectors(self.store, thread_id, s.index_dir, self.embedder.id, self.embedder.dim,
                             s.ann_threshold, submit=self.executor.submit)

    @cached_property
    def wanted_manifest(self) -> dict[str, Any]:
        return manifests.manifest(self.settings, self.embedder.id, self.embedder.dim)

    def close(self) -> None:
        """Finish background index work, write the FAISS files of long threads, close the store
        if it is ours; parts never made are left alone."""
        if "executor" in self.__dict__:
            self.executor.shutdown(wait=True)
        if "states" in self.__dict__:
            self.states.save_all()
        if "store" in self.__dict__ and self.own_store:
            self.store.close()
