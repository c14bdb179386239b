"""History files and `Thread` objects: the same path as stored threads, through a store of
their own (a temporary SQLite file, or a directory written by `semhist index`).

A thread is stored once per distinct content (its fingerprint names it in the store), its
vectors come from the embedding cache, and every ask then reads its index exactly as a bot's
ask reads a stored thread. Results refer to the thread as it was loaded, so message indices
are those of the file.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from semhist.kernel.errors import IndexMismatchError
from semhist.indexers.index import manifest as manifests
from semhist.indexers.index.thread_index import ThreadIndex
from semhist.indexers.ingest import source_key
from semhist.kernel.model import Thread
from semhist.kernel.settings import Budget, Settings
from semhist.indexers.store import SQLStore, open_store

from .history import History
from .llm import LLMClient
from .memory import memory_needs
from .pipeline import AskResult
from .pipeline.keyword import KeywordResult

KNOWN_THREADS = 1024  # thread objects whose stored id and message ids are remembered


class Engine:
    """semhist's library entry point for histories held in memory or read from files."""

    def __init__(self, settings: Settings | None = None, *, llm: LLMClient | None | str = "auto",
                 store: str | Path | SQLStore | None = None, add_threads: bool = True):
        settings = settings or Settings.load()
        self.add_threads = add_threads  # False: only threads the store holds (a saved index)
        self._scratch: Path | None = None
        if store is None:  # a store of our own, gone with the process
            self._scratch = Path(tempfile.mkdtemp(prefix="semhist-files-"))
            atexit.register(shutil.rmtree, self._scratch, True)
            store = self._scratch
        if isinstance(store, (str, Path)):
            directory = Path(store)
            settings = replace(settings, data_dir=directory, db=f"sqlite:///{directory / 'semhist.sqlite3'}")
            store = open_store(settings.db_url)
        self.settings = settings
        self.history = History(settings, store=store, llm=llm, cache_writes=True)
        self._known: OrderedDict[str, str] = OrderedDict()  # fingerprint -> stored id

    @property
    def embedder(self):
        return self.history.parts.embedder

    @property
    def llm(self) -> LLMClient | None:
        return self.history.parts.llm

    @property
    def store(self) -> SQLStore:
        return self.history.store

    def memory_needs(self, strategy: str) -> frozenset[str]:
        return memory_needs(strategy, self.settings)

    # -- storing a thread ------------------------------------------------------------------
    def put(self, thread: Thread, progress: Callable[[int], None] | None = None) -> str:
        """Store the thread; returns its id in the store. A thread asked again is stored
        once; one that grew (a file with new messages at its end) gets only the new ones, so
        what was derived from the rest (summaries, statements) is kept."""
        key = thread.fingerprint
        if key in self._known:
            self._known.move_to_end(key)
            return self._known[key]
        thread_id = "file-" + hashlib.sha256(thread.id.encode()).hexdigest()[:24]
        keys = [source_key(i, m) for i, m in enumerate(thread.messages)]
        held = self.store.count(thread_id)
        prefix = held <= len(keys) and len(self.store.existing_keys(thread_id, keys[:held])) == held
        if not self.add_threads and (not prefix or held != len(keys)):
            raise IndexMismatchError("this index holds another version of the thread (or another thread); "
                                     "rebuild it with semhist index")
        if held:
            self._check_manifest(thread_id)
        if held and not prefix:
            self.history.forget(thread_id)  # edited, not grown: store it afresh
        # every version of the thread seen before now names what the store no longer holds
        for old in [k for k, v in self._known.items() if v == thread_id]:
            del self._known[old]
        self.history.ingest(thread_id, thread, progress)
        self._known[key] = thread_id
        while len(self._known) > KNOWN_THREADS:
            self._known.popitem(last=False)
        return thread_id

    def _check_manifest(self, thread_id: str) -> None:
        found = manifests.mismatch(self.store.manifest(thread_id), self.history.parts.wanted_manifest, self.settings)
        if found:
            what, flag, stored, wanted = found
            raise IndexMismatchError(f"this index was built with {what}; ask with {flag} {stored}, or build it "
                                     f"again: semhist index FILE --out DIR {flag} {wanted}")

    def index(self, thread: Thread, progress: Callable[[int], None] | None = None) -> ThreadIndex:
        """The thread's in-memory index (stored and embedded first if needed). A thread above
        `view_limit` has none: InputError (it is searched through candidate views)."""
        return self.history.index(self.put(thread, progress))

    # -- asking ----------------------------------------------------------------------------
    def keywords(self, request: str, thread: Thread | None = None) -> KeywordResult:
        """What to search for; relative dates resolve against the thread's last message."""
        anchor = next((m.timestamp for m in reversed(thread.messages) if m.timestamp), None) if thread else None
        return self.history.parts.asker.keywords(request, anchor)

    def ask(self, thread: Thread, request: str, *, strategy: str = "blocks", budget: Budget | None = None,
            keywords: KeywordResult | None = None, answer: bool = False) -> AskResult:
        """Build the prompt for `request` with one strategy; optionally send it to the LLM."""
        return self.compare(thread, request, [strategy], budget=budget, keywords=keywords, answer=answer,
                            strict=True)[0]

    def compare(self, thread: Thread, request: str, strategies: Iterable[str], *, budget: Budget | None = None,
                keywords: KeywordResult | None = None, answer: bool = False, strict: bool = False) -> list[AskResult]:
        """The same request under several strategies; the keyword is extracted once. Without
        an LLM, strategies that need one are left out (`strict`: refused)."""
        thread_id = self.put(thread)
        results = self.history.compare(thread_id, request, strategies, budget=budget, keywords=keywords,
                                       answer=answer, log_turn=False, strict=strict)
        return [replace(r, thread=self._as_loaded(thread, r.thread)) for r in results]

    def _as_loaded(self, thread: Thread, searched: Thread) -> Thread:
        """The searched thread in the file's terms: the loaded thread itself when it was
        searched whole, else its messages at the positions of the view."""
        if len(searched.messages) == len(thread.messages):
            return thread
        position = {m.id: p for p, m in enumerate(self.store.messages(self._known[thread.fingerprint]))}
        return Thread(thread.id, tuple(thread.messages[position[m.index]] for m in searched.messages),
                      thread.queries, thread.language)

    def describe(self) -> dict[str, Any]:
        s = self.settings
        return {"embedder": s.embedder, "segmenter": s.segmenter, "gap_seconds": s.gap_seconds,
                "max_block_tokens": s.max_block_tokens, "top_n": s.top_n, "min_score": s.min_score,
                "relative_score": s.relative_score, "recent": s.recent, "window": s.window,
                "hit_window": s.hit_window, "context_tokens": s.context_tokens,
                "min_block_messages": s.min_block_messages, "utterance_k": s.utterance_k,
                "keyword": s.keyword, "llm": s.llm.model if s.llm else None}

    def close(self) -> None:
        self.history.close()
        self.store.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
