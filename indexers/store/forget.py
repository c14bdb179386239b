"""Forgetting, re-segmenting and re-embedding: the writes that change what was derived.

Each one moves the thread to a new generation, so no process extends a state built before
it; forgetting a whole thread removes its row, so the id used again is a new incarnation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from semhist.kernel.errors import InputError
from .records import StoredMessage
from .rows import COLUMNS, chunks, marks, message_row, request_key, terms_column

TABLES = ("turn_prompts", "forgotten", "response_threads", "turn_log", "notes", "summaries", "manifests", "block_term_df", "blocks", "messages", "threads")


class ForgetMixin:
    def forget_thread(self: Any, thread_id: str) -> list[StoredMessage]:
        """Remove the thread and everything stored for it; returns what was removed."""
        gone = self.messages(thread_id)
        with self._write(thread_id) as cur:
            self._drop_block_terms(cur, thread_id)
            for table in TABLES:
                cur.execute(self._sql(f"DELETE FROM {table} WHERE thread_id = ?"), (thread_id,))
        self.scrub()
        return gone

    def scrub(self: Any) -> None:
        """Make deleted rows unreadable on disk where the backend can (SQLite: overwritten
        pages, the write-ahead log emptied). PostgreSQL keeps dead rows until VACUUM."""

    def vacuum(self: Any) -> None:
        """Rewrite the store without the space deleted rows held (SQLite: VACUUM)."""

    def forget_messages(self: Any, thread_id: str, *, ids: Sequence[int] | None = None,
                        before: datetime | None = None, reason: str = "forget") -> list[StoredMessage]:
        """Remove the given messages, or every message older than `before` (and turn-log
        entries older than it), with the statements quoted from them and every summary that
        covered them. What was removed is recorded without its text (`forgotten`): when, how
        many, the time they spanned and `reason`."""
        if ids is None and before is None:
            raise InputError("forget_messages needs ids or a date")
        with self._write(thread_id) as cur:
            gone: list[StoredMessage] = []
            if ids is not None:
                for chunk in chunks([int(i) for i in ids]):
                    where = f"thread_id = ? AND id IN ({marks(chunk)})"
                    cur.execute(self._sql(f"SELECT {COLUMNS} FROM messages WHERE {where}"), (thread_id, *chunk))
                    gone.extend(message_row(r) for r in cur.fetchall())
                    cur.execute(self._sql(f"DELETE FROM messages WHERE {where}"), (thread_id, *chunk))
            else:
                cutoff = before.timestamp()
                cur.execute(self._sql(f"SELECT {COLUMNS} FROM messages WHERE thread_id = ? AND sort_ts < ?"),
                            (thread_id, cutoff))
                gone = [message_row(r) for r in cur.fetchall()]
                cur.execute(self._sql("DELETE FROM messages WHERE thread_id = ? AND sort_ts < ?"), (thread_id, cutoff))
                cur.execute(self._sql("DELETE FROM turn_log WHERE thread_id = ? AND at < ?"), (thread_id, cutoff))
                cur.execute(self._sql("DELETE FROM response_threads WHERE thread_id = ? AND at < ?"), (thread_id, cutoff))
            if gone:
                self._note_forgotten(cur, thread_id, gone, "before" if ids is None else reason)
                # kept prompts quote the thread: whatever they held of these goes with them
                cur.execute(self._sql("DELETE FROM turn_prompts WHERE thread_id = ?"), (thread_id,))
                self._forget_derived(cur, thread_id, gone)
                if ids is not None:  # by date, the log went by the same date above
                    self._forget_requests(cur, thread_id, gone)
                cur.execute(self._sql("UPDATE threads SET generation = generation + 1 WHERE thread_id = ?"),
                            (thread_id,))
                self._bump(cur, thread_id, complete=False)
        if gone:
            self.scrub()
        return gone

    def _note_forgotten(self: Any, cur, thread_id: str, gone: list[StoredMessage], reason: str) -> None:
        first, last = min(m.sort_ts for m in gone), max(m.sort_ts for m in gone)
        cur.execute(self._sql("SELECT id, reason FROM forgotten WHERE thread_id = ? ORDER BY id DESC LIMIT 1"),
                    (thread_id,))
        newest = cur.fetchone()
        if reason == "before" and newest is not None and newest[1] == "before":
            # date cuts (retention runs) extend one record: the log stays as long as the thread's cuts, not their number
            cur.execute(self._sql("UPDATE forgotten SET at = ?, first_ts = CASE WHEN first_ts < ? THEN first_ts ELSE ? END, "
                                  "last_ts = CASE WHEN last_ts > ? THEN last_ts ELSE ? END, messages = messages + ? "
                                  "WHERE thread_id = ? AND id = ?"),
                        (time.time(), first, first, last, last, len(gone), thread_id, newest[0]))
            return
        cur.execute(self._sql("INSERT INTO forgotten (thread_id, at, first_ts, last_ts, messages, reason) "
                              "VALUES (?, ?, ?, ?, ?, ?)"), (thread_id, time.time(), first, last, len(gone), reason))

    def forgotten(self: Any, thread_id: str) -> list[dict[str, Any]]:
        """What was forgotten of the thread, oldest record first: when, how many messages, the
        time they spanned (epoch seconds) and why ("forget", "edit", "before")."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT at, first_ts, last_ts, messages, reason FROM forgotten WHERE thread_id = ? "
                                  "ORDER BY id"), (thread_id,))
            return [{"at": r[0], "first_ts": r[1], "last_ts": r[2], "messages": int(r[3]), "reason": r[4]}
                    for r in cur.fetchall()]

    def _forget_derived(self: Any, cur, thread_id: str, gone: list[StoredMessage]) -> None:
        for chunk in chunks([m.id for m in gone]):
            cur.execute(self._sql(f"DELETE FROM notes WHERE thread_id = ? AND source_id IN ({marks(chunk)})"),
                        (thread_id, *chunk))
        first = min(m.key for m in gone)
        # a summary of anything from `first` on read the forgotten text
        cur.execute(self._sql("DELETE FROM summaries WHERE thread_id = ? AND (upto_ts, upto_id) >= (?, ?)"),
                    (thread_id, first[0], first[1]))

    def _forget_requests(self: Any, cur, thread_id: str, gone: list[StoredMessage]) -> None:
        """A bot stores the user's message and then asks with it: the turn log holds the same
        text as the request. Those entries go with the message, found by the request's key (not
        by time: the log's times are the server's, the message's the sender's)."""
        keys = sorted({request_key(m.content) for m in gone if m.role == "user" and m.content})
        for chunk in chunks(keys):
            cur.execute(self._sql(f"DELETE FROM turn_log WHERE thread_id = ? AND request_key IN ({marks(chunk)})"),
                        (thread_id, *chunk))

    def resegment(self: Any, thread_id: str, segment: Callable) -> None:
        """Forget every block of the thread and segment it again from the stored vectors."""
        with self._write(thread_id) as cur:
            self._drop_block_terms(cur, thread_id)
            cur.execute(self._sql("DELETE FROM block_term_df WHERE thread_id = ?"), (thread_id,))
            cur.execute(self._sql("DELETE FROM blocks WHERE thread_id = ?"), (thread_id,))
            cur.execute(self._sql("UPDATE messages SET block_no = NULL WHERE thread_id = ?"), (thread_id,))
            cur.execute(self._sql("UPDATE threads SET segment_history = NULL, generation = generation + 1, "
                                  "version = version + 1 WHERE thread_id = ?"), (thread_id,))
            self._segment(cur, thread_id, segment)

    def set_derived(self: Any, thread_id: str, rows: Sequence[tuple[int, np.ndarray, Sequence[str]]],
                    embedder: str) -> None:
        """Replace what was derived from each message, (id, vector, terms): re-embedding after a
        model change, re-tokenizing after the tokenizer's rules changed."""
        with self._write(thread_id) as cur:
            cur.executemany(self._sql("UPDATE messages SET vector = ?, embedder = ?, terms = ? "
                                      "WHERE id = ? AND thread_id = ?"),
                            [(np.asarray(v, dtype=np.float32).tobytes(), embedder, terms_column(t), i, thread_id)
                             for i, v, t in rows])
            cur.execute(self._sql("UPDATE threads SET generation = generation + 1, version = version + 1 "
                                  "WHERE thread_id = ?"), (thread_id,))
