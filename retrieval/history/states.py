"""Per-thread query-time state, kept in a bounded cache over the store (the one source of
truth) and brought up to date by appends, or from the store when another process wrote.

A thread up to `view_limit` messages keeps its whole index in memory; a longer one keeps
its FAISS vectors (the candidate view of each request is read from the store). A process that
has not seen a thread yet (a new replica, a thread evicted or routed elsewhere before) does
not make the request wait for the whole thread: past `WHOLE_AT_ONCE` messages the request reads
a candidate view (the blocks its terms and its time point to, the recent turns; no dense
candidates, as while a long thread's FAISS index is built) while the whole thread is read in
the background for the asks after it. An ask checks
the thread's marker (one read): the same marker means nothing to do; a new version means
adding what was stored since; a new generation or incarnation means building again, so no
forgotten message is ever served from memory.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from semhist.indexers.index.thread_index import ThreadIndex
from semhist.indexers.index.vectors import ThreadVectors
from semhist.indexers.segment import Segmenter
from semhist.indexers.store import AppendResult, Marker, StoreReader
from semhist.kernel.errors import SemhistError

from .views import ClosedMessages

log = logging.getLogger("semhist.history")

# A first ask reads a thread up to this many messages whole. A view reads about 700 messages
# whatever the thread's length (benchmarks/cold_thread.md); below about three times that,
# reading the thread whole costs the first ask little more and leaves nothing to read again.
WHOLE_AT_ONCE = 2_000


@dataclass
class Entry:
    """One thread's state in this process."""

    thread_id: str
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    index: ThreadIndex | None = None  # the whole thread, when it is searched whole
    vectors: ThreadVectors | None = None  # the thread's FAISS index, when it is searched through views
    closed: ClosedMessages = field(default_factory=ClosedMessages, repr=False)  # read for earlier views
    marker: Marker | None = None  # the store state this entry reflects
    verified: bool = False  # its manifest matches our settings
    retention_checked: float = float("-inf")
    loading: Future | None = field(default=None, repr=False)  # the whole thread, read in the background
    # asked as a file (a `Thread` object): read whole by its first ask, as `semhist eval` measures
    eager: bool = False

    @property
    def nbytes(self) -> int:
        return (self.index.nbytes if self.index is not None else 0) + (
            self.vectors.nbytes if self.vectors is not None else 0) + self.closed.nbytes + self._loaded_bytes

    @property
    def _loaded_bytes(self) -> int:
        """A background read that finished and waits for the thread's next ask is memory too:
        the cache's byte limit counts it."""
        loading = self.loading
        if loading is None or not loading.done() or loading.exception() is not None:
            return 0
        loaded = loading.result()
        return loaded.nbytes if loaded is not None else 0


class ThreadStates:
    def __init__(self, store: StoreReader, dim: int, segmenter: Segmenter, view_limit: int,
                 make_vectors: Callable[[str], ThreadVectors], max_threads: int, max_bytes: int,
                 submit: Callable[[Callable[[], ThreadIndex | None]], Future] | None = None):
        self.store, self.dim, self.segmenter, self.view_limit = store, dim, segmenter, view_limit
        self._make_vectors = make_vectors
        self._submit = submit
        # a first ask of a long thread reads a view while the thread is read in the background
        # (False, or no `submit`: it reads the thread whole; a benchmark compares the two)
        self.background = submit is not None
        self.whole_at_once = WHOLE_AT_ONCE
        self.max_threads, self.max_bytes = max_threads, max_bytes
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.loads = 0  # full reads of a thread, for tests and monitoring

    def entry(self, thread_id: str) -> Entry:
        with self._lock:
            entry = self._entries.get(thread_id)
            if entry is None:
                entry = self._entries[thread_id] = Entry(thread_id)
            self._entries.move_to_end(thread_id)
            return entry

    def peek(self, thread_id: str) -> Entry | None:
        with self._lock:
            return self._entries.get(thread_id)

    def discard(self, thread_id: str) -> Entry | None:
        with self._lock:
            return self._entries.pop(thread_id, None)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(e.nbytes for e in self._entries.values())

    # -- bringing an entry up to date (call with entry.lock held) ---------------------------
    def current(self, entry: Entry, marker: Marker, wait: bool = False) -> Entry:
        """Bring the entry to `marker`. Without `wait`, a thread this process has not read yet
        may be left without its index (`entry.index` None, `entry.vectors` None) while it is
        read in the background: the caller reads a view of it."""
        if marker.messages <= self.view_limit:
            entry.vectors = None
            self._take_loaded(entry, wait)
            index = entry.index
            if index is None and not (wait or entry.eager) and self.background \
                    and marker.messages > self.whole_at_once:
                self._load_later(entry)
            elif index is None or not marker.same_lineage(index.marker):
                entry.index = self._load(entry.thread_id)
            elif index.marker.version != marker.version:
                changes = self.store.changes(entry.thread_id, index.max_id, index.last_block_no)
                if not changes.marker.same_lineage(index.marker) or not index.apply(
                        changes.messages, changes.blocks, changes.segment_history, changes.marker):
                    entry.index = self._load(entry.thread_id)
        else:
            entry.index = None
            if entry.vectors is None:
                entry.vectors = self._make_vectors(entry.thread_id).open(marker)
            else:
                entry.vectors.catch_up(marker)
        entry.marker = marker
        self._evict(keep=entry.thread_id)
        return entry

    def _load_later(self, entry: Entry) -> None:
        if entry.loading is not None:
            return  # read already; the next ask takes it

        def load() -> ThreadIndex | None:
            try:
                return self._load(entry.thread_id)
            except SemhistError as exc:  # the next ask starts it again
                log.warning("reading thread %s in the background failed: %s", entry.thread_id, exc)
                return None
        entry.loading = self._submit(load)

    @staticmethod
    def _take_loaded(entry: Entry, wait: bool) -> None:
        """Take a background read that finished (it is brought up to date like any index);
        one still running is left behind when the caller cannot wait for a queue."""
        loading = entry.loading
        if loading is None or not (loading.done() or wait):
            return
        entry.loading = None
        if loading.done() and entry.index is None:
            entry.index = loading.result()
            if entry.index is not None:
                entry.closed = ClosedMessages()  # what the views read is in the whole index now

    def _load(self, thread_id: str) -> ThreadIndex:
        self.loads += 1
        whole = self.store.load(thread_id)
        return ThreadIndex.build(thread_id, whole.messages, whole.blocks, self.dim, self.segmenter,
                                 whole.segment_history, whole.marker)

    def after_write(self, thread_id: str, write: AppendResult) -> None:
        """Apply this process's own write to the cached state, when nothing else was written
        in between (else the next ask reads what it missed)."""
        entry = self.peek(thread_id)
        if entry is None or write.before is None:
            return
        with entry.lock:
            index, vectors = entry.index, entry.vectors
            if index is not None and index.marker == write.before and write.after.messages <= self.view_limit:
                history = write.history if write.history is not None else ()
                if index.apply(write.messages, write.closed, history, write.after):
                    entry.marker = write.after
                else:
                    entry.index = None  # rebuilt by the next ask
            elif vectors is not None and vectors.marker is not None and vectors.marker.version == write.before.version:
                held = [m for m in write.messages if m.vector is not None]
                if held:
                    vectors.add(np.array([m.id for m in held]), np.vstack([m.vector for m in held]), write.after)
        self._evict(keep=thread_id)

    def save_all(self) -> None:
        """Write the FAISS files of the long threads held (at shutdown)."""
        with self._lock:
            held = [e.vectors for e in self._entries.values() if e.vectors is not None]
        for vectors in held:
            vectors.save()

    def _evict(self, keep: str) -> None:
        """Drop the least recently used states beyond the limits (never the one in use)."""
        gone = []
        with self._lock:
            total = sum(e.nbytes for e in self._entries.values())
            for thread_id in list(self._entries):
                if len(self._entries) <= self.max_threads and total <= self.max_bytes:
                    break
                if thread_id != keep:
                    gone.append(self._entries.pop(thread_id))
                    total -= gone[-1].nbytes
        for entry in gone:  # its FAISS file goes to disk, so a later ask does not rebuild it
            if entry.vectors is not None:
                entry.vectors.save()
