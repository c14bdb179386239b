"""Stored threads: the facade a long-running bot uses. Append in milliseconds, ask against the
store, forget on request, and log what every prompt was built from.

Writes go to the store and update this process's state of the thread; asks read that state
(one marker read tells whether another process wrote). A `Thread` object (a history file)
takes the same path: it is stored once (files.py) and asked as a stored thread. The parts it
wires are made in parts.py; one request's work is in request.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import numpy as np

from semhist.indexers.index import manifest as manifests
from semhist.indexers.index.thread_index import ThreadIndex
from semhist.indexers.index.vectors import ThreadVectors
from semhist.indexers.ingest import IngestResult, cutoff, source_key
from semhist.indexers.lexical import TERMS_VERSION
from semhist.indexers.loader import build_thread
from semhist.indexers.store import Marker, SQLStore, StoredMessage
from semhist.kernel.errors import InputError, NotFoundError
from semhist.kernel.ids import check_thread_id
from semhist.kernel.model import Thread
from semhist.kernel.budget import Budget
from semhist.kernel.settings import Settings
from semhist.kernel.validate import resolve_zone, time_argument

from semhist.kernel.writers import OPERATOR, Writer

from . import batches, files, scopes
from . import request as request_
from .scopes import check_scope, widened
from ..llm import LLMClient
from ..pipeline import AskResult
from .maintenance import Maintenance
from .parts import Parts
from .states import Entry

log = logging.getLogger("semhist.history")

RETENTION_CHECK_S = 60.0


class History(Maintenance):
    """Stored threads, as a bot uses them: `add` a message, `ask` for the prompt of the next turn,
    `forget` what must go. One object serves every thread of its store; each thread's query-time
    state is built on first use and kept in a bounded cache (`Settings.cache_mb`)."""

    def __init__(self, settings: Settings | None = None, *, store: SQLStore | None = None,
                 llm: LLMClient | None | str = "auto", cache_writes: bool = False, add_threads: bool = True):
        """`cache_writes`: stored messages' vectors also go to the on-disk embedding cache (files,
        asked again and again). `add_threads=False`: `Thread` objects are only asked if the store
        already holds them (a saved index)."""
        self.settings = settings or Settings.load()
        self.parts = Parts(self.settings, store=store, llm=llm, cache_writes=cache_writes, add_threads=add_threads)

    @property
    def store(self) -> SQLStore:
        """The store: the source of truth for every thread (SQLite or PostgreSQL)."""
        return self.parts.store

    # -- writes --------------------------------------------------------------------------
    def ingest(self, thread_id: str, thread: Thread, progress: Callable[[int], None] | None = None) -> IngestResult:
        """Store a whole history; messages already stored from the same input are skipped."""
        check_thread_id(thread_id)
        keys = [source_key(i, m) for i, m in enumerate(thread.messages)]
        return self._write(thread_id, batches.signed(thread.messages, OPERATOR), keys, progress)

    def put(self, thread: Thread, progress: Callable[[int], None] | None = None) -> str:
        """Store a `Thread` object (a loaded history file) once; returns its id in the store.
        `ask`, `compare` and `index` take the object itself and call this."""
        return files.put(self, thread, progress)

    def add(self, thread_id: str, role: str, content: str, *, name: str | None = None,
            timestamp: datetime | str | None = None, key: str | None = None) -> int:
        """Append one message (one embedding plus O(1) store work); returns its id. `timestamp`:
        a datetime or ISO 8601 text (default: now; without a zone, `Settings.timezone`'s), as
        `add_many` takes it. `key` (e.g. a Teams activity id) makes adding the same message
        twice a no-op: the id of the stored one comes back."""
        stamp = time_argument(timestamp, "timestamp", resolve_zone(self.settings.timezone))
        raw: dict[str, Any] = {"role": role, "content": content, "name": name, "id": key, "timestamp": stamp}
        return self.add_many(thread_id, [raw]).every_id[0]

    def add_many(self, thread_id: str, messages: Sequence[Mapping[str, Any]], *,
                 writer: Writer = OPERATOR) -> IngestResult:
        """Append OpenAI chat messages, each optionally with "id" (the caller's idempotency
        key), "timestamp" (a datetime, ISO 8601 text or epoch seconds; default: now) and "name".
        Every message is checked before any is stored, so a bad one stores nothing; ids already
        stored add nothing and their message's id comes back in `every_id`. `writer`: who
        writes (kernel/writers.py); a system or developer message from a writer
        `operator_writers` does not trust is stored as quoted history, its position in `quoted`."""
        check_thread_id(thread_id)
        raw, keys, quoted = batches.prepared(messages, writer, self.settings.trusted_writers)
        thread, _ = build_thread(thread_id, raw, zone=resolve_zone(self.settings.timezone), lenient=False, hint="",
                                 max_chars=self.settings.max_message_chars)
        return replace(self._write(thread_id, batches.signed(thread.messages, writer), keys), quoted=quoted)

    def _write(self, thread_id: str, messages, keys, progress=None) -> IngestResult:
        entry = self.parts.states.entry(thread_id)
        manifest = self._verify(entry, create=True)
        result = self.parts.ingestor.append(thread_id, messages, keys, progress, manifest=manifest)
        if manifest is not None and not result.added:  # all stored before: the thread exists, ours is newer
            self.store.put_manifest(thread_id, manifest)
        entry.verified = True
        for write in result.writes:
            self.parts.states.after_write(thread_id, write)
        self._retention(entry)
        return result

    def _verify(self, entry: Entry, create: bool = False) -> dict[str, Any] | None:
        """Refuse a thread stored with another embedder or segmentation. For a write, the
        manifest to record with it: ours, for a new thread or one with an older manifest."""
        if entry.verified:
            return None
        stored = self.store.manifest(entry.thread_id)
        manifests.check(stored, self.parts.wanted_manifest, entry.thread_id, self.settings)
        if stored is not None and manifests.terms_version(stored) < TERMS_VERSION:
            # its asks still work; text the old rules cut otherwise (Chinese, Korean) misses the lexical side
            log.warning("thread %s was tokenized by older rules (terms v%d, now v%d): semhist reindex "
                        "--thread %s tokenizes it again", entry.thread_id, manifests.terms_version(stored),
                        TERMS_VERSION, entry.thread_id)
        entry.verified = stored is not None
        if create and not manifests.complete(stored, self.parts.wanted_manifest):
            # an older manifest's missing keys are ours, but not our terms: its messages keep theirs
            return {**self.parts.wanted_manifest, **stored, "terms": manifests.terms_version(stored)} if stored \
                else self.parts.wanted_manifest
        return None

    def _retention(self, entry: Entry) -> None:
        # Retention is counted in days: checking it once a minute per thread is exact enough
        # and keeps a read off every append.
        now = time.monotonic()
        if now - entry.retention_checked >= RETENTION_CHECK_S:
            entry.retention_checked = now
            days = self.store.retention(entry.thread_id)
            if days is not None:
                self.forget(entry.thread_id, before=cutoff(days, datetime.now(timezone.utc)))

    # -- reads ---------------------------------------------------------------------------
    def _current(self, thread_id: str, eager: bool = False) -> tuple[Entry, Marker]:
        """The thread's entry and its current marker (one read); the entry is brought up to
        date by `states.current` under its lock (`eager`: a file's, see `Entry.eager`)."""
        marker = self.store.marker(check_thread_id(thread_id))
        if marker is None:
            dropped = self.parts.states.discard(thread_id)
            if dropped is not None and dropped.vectors is not None:
                dropped.vectors.drop()
            raise NotFoundError(f"no stored thread {thread_id!r}; see semhist threads")
        (entry := self.parts.states.entry(thread_id)).eager |= eager
        if entry.marker is not None and entry.marker.uid != marker.uid:
            entry.verified = False  # forgotten and started again: another thread under the same id
        self._verify(entry)
        return entry, marker

    def index(self, thread: str | Thread) -> ThreadIndex:
        """The thread's whole index as it stands (threads up to `view_limit` messages)."""
        thread_id = self.put(thread) if isinstance(thread, Thread) else thread
        entry, marker = self._current(thread_id)
        with entry.lock:
            self.parts.states.current(entry, marker, wait=True)
            if entry.index is None:
                raise InputError(f"thread {thread_id} has {marker.messages} messages, more than view_limit "
                                 f"({self.settings.view_limit}): it is searched through candidate views")
            return entry.index

    def vectors(self, thread_id: str) -> ThreadVectors:
        """The thread's FAISS index (threads above `view_limit`; opened on first use)."""
        entry, marker = self._current(thread_id)
        with entry.lock:
            if entry.vectors is None:
                entry.vectors = self.parts.thread_vectors(thread_id).open(marker)
            else:
                entry.vectors.catch_up(marker)
            return entry.vectors

    def search(self, thread_id: str, vector: np.ndarray, k: int = 10) -> list[tuple[StoredMessage, float]]:
        """The k stored messages nearest to a query vector, with their cosine."""
        entry, marker = self._current(thread_id)
        with entry.lock:
            self.parts.states.current(entry, marker, wait=True)
            if entry.index is not None:
                scores, rows = entry.index.vectors.search(vector, k)
                ids = [entry.index.messages[entry.index.rows[r]].index for r in rows]
            else:
                scores, found = entry.vectors.search(vector, k)
                ids = [int(i) for i in found]
        stored = {m.id: m for m in self.store.messages(thread_id, ids=ids)}
        return [(stored[i], float(s)) for s, i in zip(scores, ids) if i in stored]

    def ask(self, thread: str | Thread, request: str, *, strategy: str = "blocks", budget: Budget | None = None,
            answer: bool = False, log_turn: bool = True, keywords=None, system_prompt: str | None = None,
            closing: str | None = None, scope: str = "thread",
            readable: Callable[[str], bool] | None = None) -> AskResult:
        """Build the prompt for a stored thread (its id) or a `Thread` object, and record what
        went into it (for a stored thread)."""
        return self.compare(thread, request, [strategy], budget=budget, answer=answer, log_turn=log_turn,
                            keywords=keywords, strict=True, system_prompt=system_prompt, closing=closing,
                            scope=scope, readable=readable)[0]

    def compare(self, thread: str | Thread, request: str, strategies: Iterable[str], *, budget: Budget | None = None,
                answer: bool = False, log_turn: bool = True, keywords=None, strict: bool = False,
                system_prompt: str | None = None, closing: str | None = None, scope: str = "thread",
                readable: Callable[[str], bool] | None = None) -> list[AskResult]:
        """The same request under several strategies; the keyword is extracted once. A
        strategy that needs an LLM when none is configured is left out (the caller says so),
        or refused when `strict`. `system_prompt` replaces the configured one for this request;
        `closing` is a system message put just before the request (a caller that answers the
        prompt itself passes `answer_reminder(request)`, as `answer=True` does). A `Thread`
        object is stored first (`put`); its results refer to it as loaded, and no turn is logged.
        `scope`: "thread"; "channel", the searching strategies also search the other threads of
        the thread's channel (`place`); "auto", when the request names the channel or other
        threads. `readable`: which of those the caller may read (the service's token)."""
        thread_id = self.put(thread) if isinstance(thread, Thread) else thread
        check_scope(scope)
        beyond = (lambda vector, keywords: scopes.excerpts(self, thread_id, vector, keywords, readable)) \
            if widened(scope, request) and not isinstance(thread, Thread) else None
        eager = isinstance(thread, Thread)  # a file's thread: read whole by its first ask
        results = request_.compare(self.parts, lambda: self._current(thread_id, eager), thread_id, request, strategies,
                                   budget=budget, answer=answer, keywords=keywords, strict=strict,
                                   log_turn=None if isinstance(thread, Thread) else log_turn,
                                   system_prompt=system_prompt, closing=closing, elsewhere=beyond)
        if isinstance(thread, Thread):
            return [replace(r, thread=files.as_loaded(self, thread, thread_id, r.thread)) for r in results]
        return results

    def threads(self):
        return self.store.threads()

    def log(self, thread_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        self._current(thread_id)
        return self.store.turns(thread_id, limit, prompts=True)

    def close(self) -> None:
        """Finish background index work and write the FAISS files of long threads."""
        self.parts.close()
