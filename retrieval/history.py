"""Stored threads: the facade a long-running bot uses. Append in milliseconds, ask against
the store, forget on request, and log what every prompt was built from.

A thread up to `view_limit` messages is searched whole (the same hybrid retrieval that was
benchmarked on files). A longer one is narrowed first: the nearest messages in its FAISS
index (HNSW when large) bring their blocks, joined by the recent turns and the open block;
retrieval then runs on that view, so a request costs the same at 1M messages as at 10k.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from typing import Any

import numpy as np

from indexers.build import embedding_text
from indexers.cache import cache_key
from indexers.embed import PASSAGE, get_embedder
from indexers.errors import IndexMismatchError, InputError
from indexers.index import FORMAT_VERSION, HistoryIndex, VectorIndex, thread_fingerprint
from indexers.loader import loads
from indexers.ingest import IngestResult, Ingestor, as_message, cutoff, source_key
from indexers.model import Block, Thread
from indexers.pii import masker_from_setting
from indexers.segment import get_segmenter
from indexers.settings import Budget, Settings
from indexers.store import SQLStore, StoredBlock, StoredMessage, check_thread_id, open_store
from indexers.vectors import ThreadVectors

from .engine import AskResult, Engine
from .search import embed_query

log = logging.getLogger("semhist.history")

CANDIDATE_HITS = 32  # nearest messages whose blocks enter the view of a long thread
CANDIDATE_BLOCKS = 16  # at most this many of their blocks (a budget holds far fewer)
RECENT_VIEW = 40  # latest messages always in the view
RETENTION_CHECK_S = 60.0


@dataclass(frozen=True)
class View:
    """The part of a stored thread one request searches, in the pipeline's form."""

    thread: Thread
    index: HistoryIndex
    whole: bool  # the whole thread, or candidates of a long one
    stored_ids: tuple[int, ...]


class History:
    def __init__(self, settings: Settings | None = None, *, store: SQLStore | None = None,
                 engine: Engine | None = None):
        self.settings = settings or Settings.load()
        self._store = store
        self.engine = engine or Engine(self.settings)
        self._vectors: dict[str, ThreadVectors] = {}
        self.last_view: View | None = None  # what the last ask searched (for rendering it)
        self._whole: dict[str, tuple[tuple[int, int], View]] = {}  # whole-thread views by thread state
        self._verified: set[str] = set()  # threads whose stored embedder matches ours
        self._retention_checked: dict[str, float] = {}

    @cached_property
    def store(self) -> SQLStore:
        return self._store or open_store(self.settings.db_url)

    @cached_property
    def segment_params(self) -> dict[str, Any]:
        s = self.settings
        return {"gap_seconds": s.gap_seconds, "max_block_tokens": s.max_block_tokens,
                "min_block_messages": s.min_block_messages, "percentile": s.topic_percentile}

    @cached_property
    def ingestor(self) -> Ingestor:
        s = self.settings
        # The store keeps every vector, so writes skip the embedding cache: forgetting then
        # has one place to erase.
        return Ingestor(self.store, get_embedder(s.embedder), self.engine.embedder.id,
                        get_segmenter(s.segmenter, **self.segment_params), masker_from_setting(s.pii), s.batch_size)

    # -- writes --------------------------------------------------------------------------
    def ingest(self, thread_id: str, thread: Thread, progress: Callable[[int], None] | None = None) -> IngestResult:
        """Store a whole history; messages already stored from the same input are skipped."""
        self._check_embedder(thread_id, create=True)
        keys = [source_key(i, m) for i, m in enumerate(thread.messages)]
        result = self.ingestor.append(thread_id, thread.messages, keys, progress)
        self._after_write(thread_id)
        return result

    def add(self, thread_id: str, role: str, content: str, *, name: str | None = None,
            timestamp: datetime | None = None) -> int:
        """Append one message (one embedding plus O(1) store work); returns its id."""
        check_thread_id(thread_id)
        raw = {"role": role, "content": content, "timestamp": (timestamp or datetime.now(timezone.utc)).isoformat()}
        if name:
            raw["name"] = name
        if not content.strip():
            raise InputError("the message text is empty")
        msg = loads(json.dumps([raw], ensure_ascii=False)).threads[0].messages[0]  # same validation as files
        self._check_embedder(thread_id, create=True)
        ids = self.ingestor.append(thread_id, [msg]).ids
        self._after_write(thread_id)
        return ids[0]

    def _manifest(self) -> dict[str, Any]:
        """What a thread's vectors mean, as recorded in the store."""
        return {"embedder": self.engine.embedder.id, "dim": self.engine.embedder.dim, "format": FORMAT_VERSION}

    def _check_embedder(self, thread_id: str, create: bool = False) -> None:
        """Refuse a thread stored with another embedder; a write to a new thread records ours."""
        if thread_id in self._verified:
            return
        manifest = self.store.manifest(thread_id) if self.store.has_thread(thread_id) else None
        if manifest is None and create:
            manifest = self._manifest()
            self.store.put_manifest(thread_id, manifest)
        if (manifest or {}).get("embedder") not in (None, self.engine.embedder.id):
            raise IndexMismatchError(
                f"thread {thread_id} was indexed with {manifest['embedder']!r}, not {self.engine.embedder.id!r}; "
                f"run: semhist reindex --thread {thread_id} --embedder {self.settings.embedder}")
        self._verified.add(thread_id)

    def _after_write(self, thread_id: str) -> None:
        # Retention is counted in days: checking it once a minute per thread is exact enough
        # and keeps a read off every append.
        now = time.monotonic()
        if now - self._retention_checked.get(thread_id, -RETENTION_CHECK_S) >= RETENTION_CHECK_S:
            self._retention_checked[thread_id] = now
            days = self.store.retention(thread_id)
            if days is not None:
                self.forget(thread_id, before=cutoff(days, datetime.now(timezone.utc)))
        if thread_id in self._vectors:
            self._vectors[thread_id].sync()

    # -- forgetting and maintenance ------------------------------------------------------
    def forget(self, thread_id: str, *, ids: list[int] | None = None, before: datetime | None = None) -> int:
        """Forget the whole thread (no ids, no date), some messages, or all before a date:
        text, vectors, cached embeddings, index files, summaries and notes, turn log."""
        check_thread_id(thread_id)
        whole = ids is None and before is None
        if whole:
            gone = self.store.forget_thread(thread_id)
            self._verified.discard(thread_id)  # a new thread under this id starts a new manifest
        else:
            gone = self.store.forget_messages(thread_id, ids=ids, before=before)
        if gone or whole:
            self._purge_derived(thread_id, gone)
            if not whole and self.store.count(thread_id):
                self.store.resegment(thread_id, self.ingestor.segment_tail)
        return len(gone)

    def _purge_derived(self, thread_id: str, gone: list[StoredMessage]) -> None:
        cache = self.engine.embedder.cache
        keys = [cache_key(self.engine.embedder.id, PASSAGE, embedding_text(as_message(m))) for m in gone]
        cache.delete_many(keys)
        self.engine.memory_store.forget_thread(thread_id)
        vectors = self._vectors.pop(thread_id, None) or self._thread_vectors(thread_id, open_it=False)
        vectors.drop()
        self.engine.forget_indexes()
        self._whole.pop(thread_id, None)

    def set_retention(self, thread_id: str, days: float | None) -> int:
        """Keep the thread's messages `days` days (None: forever); applies it now and on
        writes (other processes notice within a minute). Returns how many were forgotten."""
        self._require(thread_id)
        self.store.set_retention(thread_id, days)
        self._retention_checked.pop(thread_id, None)
        if days is None:
            return 0
        return self.forget(thread_id, before=cutoff(days, datetime.now(timezone.utc)))

    def forget_expired(self) -> dict[str, int]:
        now = datetime.now(timezone.utc)
        out = {}
        for info in self.store.threads():
            if info.retention_days is not None:
                out[info.thread_id] = self.forget(info.thread_id, before=cutoff(info.retention_days, now))
        return out

    def reindex(self, thread_id: str, progress: Callable[[int], None] | None = None) -> int:
        """Embed the thread again with the current embedder and rebuild its index."""
        n = self.ingestor.reembed(thread_id, progress)
        self.store.put_manifest(thread_id, self._manifest())
        self._vectors.pop(thread_id, None)
        self._thread_vectors(thread_id).rebuild("reindex asked for")
        return n

    # -- reads ---------------------------------------------------------------------------
    def _thread_vectors(self, thread_id: str, open_it: bool = True) -> ThreadVectors:
        if thread_id not in self._vectors or not open_it:
            tv = ThreadVectors(self.store, thread_id, self.settings.index_dir, self.engine.embedder.id,
                               self.engine.embedder.dim, self.settings.ann_threshold)
            if not open_it:
                return tv
            self._vectors[thread_id] = tv.open()
        return self._vectors[thread_id]

    def vectors(self, thread_id: str, state: tuple[int, int] | None = None) -> ThreadVectors:
        """The thread's FAISS index, opened (rebuilt if needed) and caught up with the store."""
        state = state or self._require(thread_id)
        tv = self._thread_vectors(thread_id)
        if tv.generation != state[0]:  # another process forgot messages: reload or rebuild
            tv.open()
        else:
            tv.sync()
        return tv

    def _require(self, thread_id: str) -> tuple[int, int]:
        """The thread's (generation, message count); refuses unknown threads and threads
        embedded with another model."""
        state = self.store.state(check_thread_id(thread_id))
        if state == (0, 0) and not self.store.has_thread(thread_id):
            self._verified.discard(thread_id)
            raise InputError(f"no stored thread {thread_id!r}; see semhist threads")
        self._check_embedder(thread_id)
        return state

    def search(self, thread_id: str, vector: np.ndarray, k: int = 10) -> list[tuple[StoredMessage, float]]:
        """The k stored messages nearest to a query vector, with their cosine."""
        scores, ids = self.vectors(thread_id).search(vector, k)
        found = {m.id: m for m in self.store.messages(thread_id, ids=[int(i) for i in ids])}
        return [(found[int(i)], float(s)) for s, i in zip(scores, ids) if int(i) in found]

    def view(self, thread_id: str, query_vector: np.ndarray | None = None) -> View:
        state = self._require(thread_id)
        if state[1] <= self.settings.view_limit or query_vector is None:
            cached = self._whole.get(thread_id)
            if cached and cached[0] == state:
                return cached[1]
            stored = self.store.messages(thread_id, with_vectors=True)
            view = self._build_view(thread_id, stored, self.store.blocks(thread_id), whole=True)
            self._whole[thread_id] = (state, view)
            return view
        tv = self.vectors(thread_id, state)
        _, hits = tv.search(query_vector, CANDIDATE_HITS)
        owners = self.store.block_of(thread_id, [int(i) for i in hits])
        ranked = list(dict.fromkeys(owners[int(i)] for i in hits if owners.get(int(i)) is not None))
        chosen = [b for b in ranked if b >= 0][:CANDIDATE_BLOCKS]  # best-ranked first
        blocks = self.store.blocks(thread_id, sorted(chosen))
        recent = self.store.messages(thread_id, last=RECENT_VIEW)
        wanted = {i for b in blocks for i in b.message_ids} | {m.id for m in recent}
        wanted |= {m.id for m in self.store.tail(thread_id, with_vectors=False)}
        # vectors come from the FAISS index in memory, not as 2 KB blobs over the wire
        stored = self.store.messages(thread_id, ids=sorted(wanted))
        return self._build_view(thread_id, tv.attach(stored), blocks, whole=False)

    def _build_view(self, thread_id: str, stored: list[StoredMessage], closed: list[StoredBlock], whole: bool) -> View:
        messages = tuple(as_message(m) for m in stored)
        thread = Thread(thread_id, messages)
        pos = {m.id: p for p, m in enumerate(stored)}
        groups = [(tuple(pos[i] for i in b.message_ids if i in pos), b.tokens, b.parts) for b in closed]
        groups = [g for g in groups if g[0]]
        in_block = {p for g in groups for p in g[0]}
        open_pos = [p for p, m in enumerate(stored) if m.block_no is None and m.role != "system" and p not in in_block]
        if open_pos:  # the still-open block(s), segmented now as they stand
            tail = [stored[p] for p in open_pos]
            sub = self.ingestor.segmenter.segment([as_message(m, i) for i, m in enumerate(tail)], _stack(tail))
            groups += [(tuple(open_pos[i] for i in b.message_ids), b.tokens, b.parts) for b in sub]
        groups.sort(key=lambda g: g[0][0])
        blocks = tuple(Block(k, ids, messages[ids[0]].timestamp, messages[ids[-1]].timestamp, tokens, tuple(parts))
                       for k, (ids, tokens, parts) in enumerate(groups))
        ordered = tuple(p for b in blocks for p in b.message_ids)
        vectors = _stack([stored[p] for p in ordered], self.engine.embedder.dim)
        manifest = {**self._manifest(), "thread_id": thread_id, "thread_fingerprint": thread_fingerprint(thread)}
        index = HistoryIndex(manifest, blocks, ordered, VectorIndex(vectors),
                             tuple(stored[p].terms for p in ordered))
        return View(thread, index, whole, tuple(m.id for m in stored))

    def ask(self, thread_id: str, request: str, *, strategy: str = "blocks", budget: Budget | None = None,
            answer: bool = False, log_turn: bool = True) -> AskResult:
        """Build the prompt for a stored thread and record what went into it."""
        start = time.perf_counter()
        self._require(thread_id)
        # relative dates ("last week") count back from the thread's last message
        keywords = self.engine.keywords(request, Thread(thread_id, tuple(
            as_message(m) for m in self.store.messages(thread_id, last=1))))
        vector = embed_query(self.engine.embedder, keywords.query)
        view = self.last_view = self.view(thread_id, vector)
        viewed = time.perf_counter()
        self.engine.register_index(view.thread, view.index)
        result = self.engine.ask(view.thread, request, strategy=strategy, budget=budget, keywords=keywords,
                                 answer=answer)
        if log_turn:
            masker = self.ingestor.masker  # the log keeps no PII the store would not
            self.store.log_turn(thread_id, _turn_record(result, view, masker, {
                "view_ms": round((viewed - start) * 1000, 2), "total_ms": round((time.perf_counter() - start) * 1000, 2)}))
        return result

    def threads(self):
        return self.store.threads()

    def log(self, thread_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        self._require(thread_id)
        return self.store.turns(thread_id, limit)

    def close(self) -> None:
        for tv in self._vectors.values():
            tv.save()
        if "store" in self.__dict__:
            self.store.close()


def _stack(messages: list[StoredMessage], dim: int | None = None) -> np.ndarray | None:
    dim = dim or next((len(m.vector) for m in messages if m.vector is not None), 0)
    if not dim:
        return None
    out = np.zeros((len(messages), dim), dtype=np.float32)
    for i, m in enumerate(messages):
        if m.vector is not None:
            out[i] = m.vector
    return out


def _turn_record(result: AskResult, view: View, masker, timings: dict[str, float]) -> dict[str, Any]:
    """What one ask sent and why: enough to answer "why did the bot forget X" later."""
    kw = result.keywords
    thread = view.thread
    blocks = [{"block_messages": [thread.messages[r.message_ids[0]].index, thread.messages[r.message_ids[-1]].index],
               "score": round(r.score, 4) if r.score is not None else None}
              for r in result.prompt.selection.retrieved]
    return {
        "request": masker(result.request) if masker else result.request, "strategy": result.strategy,
        "keyword": [masker(k) if masker else k for k in kw.keywords] if kw else None, "extractor": kw.source if kw else None,
        "extractor_reason": kw.reason if kw else None, "intent": kw.intent if kw else None,
        "time_range": str(kw.time_range) if kw and kw.time_range else None,
        "retrieved": blocks, "prompt_tokens": result.prompt.tokens, "budget_tokens": result.budget_tokens,
        "full_tokens": result.full_tokens, "llm_calls": result.llm_calls,
        "view": {"messages": len(view.stored_ids), "whole_thread": view.whole},
        "timings_ms": {**timings, "keyword_ms": round(kw.ms, 2) if kw else 0.0,
                       "selection_ms": round(result.selection_ms, 2)},
        "answered": result.answer is not None,
    }
