"""History files and `Thread` objects asked through the same path as stored threads.

A thread object is stored once per distinct content (its fingerprint names it in the store),
and every ask then reads the stored thread exactly as a bot's ask does. Results refer to the
thread as it was loaded, so message indices are those of the file.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from semhist.indexers.index import manifest as manifests
from semhist.indexers.ingest import source_key
from semhist.kernel.errors import IndexMismatchError
from semhist.kernel.model import Thread

if TYPE_CHECKING:
    from .facade import History

KNOWN_THREADS = 1024  # thread objects whose stored id is remembered
POSITION_MAPS = 4  # long threads whose store-id -> file-position map is kept (a dict of its messages)


class Known:
    """Which stored thread holds which thread object (by fingerprint), bounded."""

    def __init__(self, limit: int = KNOWN_THREADS):
        self.limit = limit
        self._ids: OrderedDict[str, str] = OrderedDict()  # fingerprint -> stored id
        # a few threads' store ids -> file positions (a view names store ids): read once, not per ask
        self.positions: OrderedDict[str, dict[int, int]] = OrderedDict()

    def get(self, thread: Thread) -> str | None:
        found = self._ids.get(thread.fingerprint)
        if found is not None:
            self._ids.move_to_end(thread.fingerprint)
        return found

    def drop(self, thread_id: str) -> None:
        """Forget every thread object stored under `thread_id` (its versions seen before now
        name what the store no longer holds)."""
        for old in [k for k, v in self._ids.items() if v == thread_id]:
            del self._ids[old]
        for old in [k for k in self.positions if k.startswith(thread_id + "\x00")]:
            del self.positions[old]

    def remember(self, thread: Thread, thread_id: str) -> None:
        self._ids[thread.fingerprint] = thread_id
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)


def stored_id(thread: Thread) -> str:
    """The id a thread object is stored under: its own id, hashed into a valid thread id."""
    return "file-" + hashlib.sha256(thread.id.encode()).hexdigest()[:24]


def put(history: History, thread: Thread, progress: Callable[[int], None] | None = None) -> str:
    """Store the thread; returns its id in the store. A thread asked again is stored once;
    one that grew (a file with new messages at its end) gets only the new ones, so what was
    derived from the rest (summaries, statements) is kept."""
    known = history.parts.known
    found = known.get(thread)
    if found is not None:
        return found
    store, thread_id = history.store, stored_id(thread)
    keys = [source_key(i, m) for i, m in enumerate(thread.messages)]
    held = store.count(thread_id)
    prefix = held <= len(keys) and len(store.existing_keys(thread_id, keys[:held])) == held
    if not history.parts.add_threads and (not prefix or held != len(keys)):
        raise IndexMismatchError("this index holds another version of the thread (or another thread); "
                                 "rebuild it with semhist index")
    if held:
        _check_manifest(history, thread_id)
    if held and not prefix:
        history.forget(thread_id)  # edited, not grown: store it afresh
    known.drop(thread_id)
    history.ingest(thread_id, thread, progress)
    known.remember(thread, thread_id)
    return thread_id


def _check_manifest(history: History, thread_id: str) -> None:
    found = manifests.mismatch(history.store.manifest(thread_id), history.parts.wanted_manifest, history.settings)
    if found:
        what, flag, stored, wanted = found
        asked = f"ask with{manifests.option(flag, stored)}" if stored is not None else f"ask without {flag}"
        raise IndexMismatchError(f"this index was built with {what}; {asked}, or build it "
                                 f"again: semhist index FILE --out DIR{manifests.option(flag, wanted)}")


def as_loaded(history: History, thread: Thread, thread_id: str, searched: Thread) -> Thread:
    """The searched thread in the file's terms: the loaded thread itself when it was searched
    whole, else its messages at the positions of the view."""
    if len(searched.messages) == len(thread.messages):
        return thread
    known = history.parts.known
    key = f"{thread_id}\x00{thread.fingerprint}"
    position = known.positions.get(key)
    if position is None:  # the thread's every row, once per thread object (it was read per ask)
        position = {m.id: p for p, m in enumerate(history.store.messages(thread_id))}
        known.positions[key] = position
        while len(known.positions) > POSITION_MAPS:
            known.positions.popitem(last=False)
    known.positions.move_to_end(key)
    return Thread(thread.id, tuple(thread.messages[position[m.index]] for m in searched.messages),
                  thread.queries, thread.language)
