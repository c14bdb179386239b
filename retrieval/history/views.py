"""The candidate view of a thread longer than `view_limit`: what one request searches.

The blocks of the nearest messages in the thread's FAISS index (HNSW when large), the blocks
whose rarest matching terms score best in the store's full-text index (the same
janome/Snowball terms the ranker uses), the messages of a time the request names, the recent
turns, the open block and every operator instruction. Retrieval then runs on that view
exactly as on a whole thread, so a request costs the same at 1M messages as at 10k.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from indexers.index.thread_index import ThreadIndex
from indexers.index.vectors import ThreadVectors
from indexers.segment import Segmenter
from indexers.store import Marker, SQLStore, StoredMessage

from ..pipeline.keyword import KeywordResult

CANDIDATE_HITS = 32  # nearest messages whose blocks enter the view
DENSE_BLOCKS = 16  # at most this many of their blocks (a budget holds far fewer)
LEXICAL_BLOCKS = 16  # blocks taken for their terms
RECENT_VIEW = 40  # latest messages always in the view
TIME_MESSAGES = 400  # messages of a named time, the earliest first
CACHED_MESSAGES = 8_000  # messages of closed blocks kept between requests, per thread


class ClosedMessages:
    """Messages of closed blocks read for earlier views of one thread: they never change
    (until the thread's generation does), so later views read only what is new to them."""

    def __init__(self, limit: int = CACHED_MESSAGES):
        self.limit = limit
        self._held: OrderedDict[int, StoredMessage] = OrderedDict()
        self._lineage: tuple[str, int] | None = None

    def get(self, store: SQLStore, thread_id: str, ids: set[int], marker: Marker) -> list[StoredMessage]:
        if self._lineage != (marker.uid, marker.generation):
            self._held.clear()
            self._lineage = (marker.uid, marker.generation)
        missing = [i for i in ids if i not in self._held]
        found = {i: self._held[i] for i in ids if i in self._held}
        for m in store.messages(thread_id, ids=missing) if missing else ():
            found[m.id] = m
            if m.block_no is not None:
                self._held[m.id] = m
        for i in found:
            if i in self._held:
                self._held.move_to_end(i)
        while len(self._held) > self.limit:
            self._held.popitem(last=False)
        return list(found.values())

    @property
    def nbytes(self) -> int:
        return len(self._held) * 700


def candidate_view(store: SQLStore, vectors: ThreadVectors, cache: ClosedMessages, marker: Marker,
                   query: np.ndarray | None, keywords: KeywordResult | None, dim: int,
                   segmenter: Segmenter) -> ThreadIndex:
    thread_id = vectors.thread_id
    chosen = _dense_blocks(store, vectors, query) if query is not None else []
    if keywords is not None:
        chosen += [no for no, _ in store.search_blocks(thread_id, keywords.terms, LEXICAL_BLOCKS) if no not in chosen]
    blocks = store.blocks(thread_id, sorted(chosen))
    fresh = store.tail(thread_id, with_vectors=False) + store.system_messages(thread_id)
    if keywords is not None and keywords.time_range is not None:
        span = keywords.time_range
        fresh += store.in_time(thread_id, span.start.timestamp(), span.end.timestamp(), TIME_MESSAGES)
    known = {m.id for m in fresh}
    wanted = ({i for b in blocks for i in b.message_ids} | set(store.last_ids(thread_id, RECENT_VIEW))) - known
    stored = sorted({m.id: m for m in fresh + cache.get(store, thread_id, wanted, marker)}.values(),
                    key=lambda m: m.key)
    index = ThreadIndex.build(thread_id, stored, blocks, dim, segmenter, marker=marker, whole=False,
                              vectors=_vectors(store, vectors, stored))
    index.history_tokens = marker.tokens  # budgets and compaction price the whole thread
    return index


def _dense_blocks(store: SQLStore, vectors: ThreadVectors, query: np.ndarray) -> list[int]:
    _, hits = vectors.search(query, CANDIDATE_HITS)
    owners = store.block_of(vectors.thread_id, [int(i) for i in hits])
    ranked = dict.fromkeys(owners[int(i)] for i in hits if owners.get(int(i)) is not None)
    return [b for b in ranked if b >= 0][:DENSE_BLOCKS]  # best-ranked first


def _vectors(store: SQLStore, vectors: ThreadVectors, stored: list[StoredMessage]) -> dict[int, np.ndarray]:
    """Vectors come from the FAISS index in memory, not as 2 KB blobs over the wire; what it
    does not hold yet (stored by another process a moment ago) is read from the store."""
    searchable = [m.id for m in stored if m.role != "system"]
    found = vectors.vectors_of(searchable)
    missing = [i for i in searchable if i not in found]
    if missing:
        found.update({m.id: m.vector for m in store.messages(vectors.thread_id, ids=missing, with_vectors=True)
                      if m.vector is not None})
    return found
