"""Forgetting, editing, retention, re-embedding and placing (tenant, channel) of stored threads."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from semhist.indexers.embed import PASSAGE, EmbeddingCache, cache_key
from semhist.kernel.errors import BackendError, InputError, NotFoundError
from semhist.indexers.index import manifest as manifests
from semhist.indexers.ingest import check_identifiers, cutoff
from semhist.kernel.model import embedding_text
from semhist.kernel.ids import check_thread_id
from semhist.kernel.validate import resolve_zone, time_argument
from semhist.kernel.model import Place, StoredMessage, as_message



log = logging.getLogger(__name__)


class Maintenance:
    def forget(self: Any, thread_id: str, *, ids: list[int] | None = None,
               before: datetime | str | None = None) -> int:
        """Forget the whole thread (no ids, no date), some messages, or all before a date:
        text, vectors, cached embeddings, index files, summaries and statements, turn log.
        `before`: a datetime or ISO 8601 text, as `add` takes a time. Every process notices at
        its next read of the thread."""
        check_thread_id(thread_id)
        before = time_argument(before, "before", resolve_zone(self.settings.timezone))
        if ids is not None and not all(isinstance(i, int) and 0 < i < 2**63 for i in ids):
            raise InputError(f"message ids are positive integers below 2^63; got {ids!r}"[:200], field="ids")
        whole = ids is None and before is None
        if whole:
            gone = self.store.forget_thread(thread_id)
        else:
            gone = self.store.forget_messages(thread_id, ids=ids, before=before)
        if gone or whole:
            self._purge(thread_id, gone)
            # a message of the open tail belongs to no block yet: only closed blocks are made again
            if not whole and any(_closed(m) for m in gone) and self.store.count(thread_id):
                self.store.resegment(thread_id, self.parts.ingestor.segment_tail)
        return len(gone)

    def edit(self: Any, thread_id: str, key: str, content: str, *, name: str | None = None) -> int | None:
        """Replace the message stored under the caller's `key` (a Teams edit, or an undelete
        that restores it) by `content`, at the same place in time: the old text is forgotten
        like any forgotten message (text, vectors, blocks, statements quoting it), the new one
        stored and searched from the next ask. Returns the new message's id; None when no
        message has that key (stored nothing: a caller that wants it stored adds it)."""
        check_thread_id(thread_id)
        try:
            old_id = self.store.id_of(thread_id, key)
        except NotFoundError:
            return None
        old = self.store.messages(thread_id, ids=[old_id])[0]
        gone = self.store.forget_messages(thread_id, ids=[old_id], reason="edit")
        self._purge(thread_id, gone)
        stamp = old.timestamp.isoformat() if old.timestamp else None
        new = self.add_many(thread_id, [{"role": old.role, "content": content, "name": name or old.name,
                                         "id": key, "timestamp": stamp}]).every_id[0]
        if _closed(old):  # stored at its old time among later messages: the blocks are made again around it
            self.store.resegment(thread_id, self.parts.ingestor.segment_tail)
            self._purge(thread_id, [])
        return new

    def _purge(self: Any, thread_id: str, gone: list[StoredMessage]) -> None:
        entry = self.parts.states.discard(thread_id)
        vectors = entry.vectors if entry is not None and entry.vectors is not None else self.parts.thread_vectors(thread_id)
        vectors.drop()
        keys = [cache_key(self.parts.embedder.id, PASSAGE, embedding_text(as_message(m))) for m in gone]
        self.parts.embedder.cache.delete_many(keys)
        # `semhist ask FILE` caches message vectors on disk; the same texts stored as a thread
        # and forgotten must not stay there
        disk = self.settings.cache_dir / "embeddings.sqlite3"
        if keys and disk.exists() and self.parts.embedder.cache.path != disk:
            try:
                cache = EmbeddingCache(disk)
                try:
                    cache.delete_many(keys)
                finally:
                    cache.close()
            except BackendError as exc:  # the store has forgotten: say what is left, do not undo that
                log.warning("%s: forgotten, but their cached vectors in %s remain: %s", thread_id, disk, exc)

    def place(self: Any, thread_id: str, *, tenant: str | None = None, channel: str | None = None,
              check_only: bool = False) -> None:
        """Record where the thread belongs (made if new): its tenant and its channel, each set
        once. Threads of one tenant and channel reach each other with `scope="channel"`. With
        masking on (the thread's, or this process's for a new thread), an id holding personal
        data is refused, as a thread id is. `check_only`: refuse what would be refused, record
        nothing (a caller that stores the thread's first messages before placing it)."""
        check_thread_id(thread_id)
        masker = self.parts.ingestor.masker(self.store.pii(thread_id))
        if masker:
            check_identifiers(thread_id, [], masker, tenant=tenant, channel=channel)
        if not check_only:
            self.store.place(thread_id, Place(tenant, channel))

    def set_retention(self: Any, thread_id: str, days: float | None) -> int:
        """Keep the thread's messages `days` days (None: forever); applies it now and on
        writes (other processes notice within a minute). Returns how many were forgotten."""
        self._current(thread_id)
        self.store.set_retention(thread_id, days)
        entry = self.parts.states.peek(thread_id)
        if entry is not None:
            entry.retention_checked = float("-inf")
        if days is None:
            return 0
        return self.forget(thread_id, before=cutoff(days, datetime.now(timezone.utc)))

    def forget_expired(self: Any) -> dict[str, int]:
        now = datetime.now(timezone.utc)
        # thread by thread: on PostgreSQL each cut is work in the thread's own partition
        return {thread_id: self.forget(thread_id, before=cutoff(days, now)) for thread_id, days in self.store.retained()}

    def reindex(self: Any, thread_id: str, progress: Callable[[int], None] | None = None) -> int:
        """Embed and tokenize the thread again with the current embedder and tokenizer rules,
        segment it again with the current settings, and record them; the index is rebuilt on
        the next read. Summaries, statements and the turn log are kept."""
        if not self.store.has_thread(check_thread_id(thread_id)):
            raise NotFoundError(f"no stored thread {thread_id!r}; see semhist threads")
        n = self.parts.ingestor.reembed(thread_id, progress)
        self.store.put_manifest(thread_id, manifests.manifest(self.settings, self.parts.embedder.id, self.parts.embedder.dim))
        self._purge(thread_id, [])
        return n


def _closed(message: StoredMessage) -> bool:
    """Whether the message is in a closed block (not the open tail)."""
    return message.block_no is not None and message.block_no >= 0
