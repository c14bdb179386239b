"""What compaction derived from a thread and cannot regenerate identically later: rolling
summaries, the structured list of user statements, and per-ask figures for monitoring.

One SQLite file. Each record carries a hash of the thread prefix it was derived from; a
record whose prefix no longer matches the thread (edited or replaced history) is ignored.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .errors import BackendError
from .model import Thread

_SCHEMA = """
CREATE TABLE IF NOT EXISTS summaries (
    thread_id TEXT NOT NULL, upto INTEGER NOT NULL, prefix_hash TEXT NOT NULL, text TEXT NOT NULL,
    model TEXT NOT NULL, llm_ms REAL NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, thread_id TEXT NOT NULL, source INTEGER NOT NULL,
    kind TEXT NOT NULL, text TEXT NOT NULL, quote TEXT NOT NULL, superseded_by INTEGER,
    prefix_hash TEXT NOT NULL, model TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS notes_progress (
    thread_id TEXT PRIMARY KEY, upto INTEGER NOT NULL, prefix_hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    thread_id TEXT NOT NULL, at TEXT NOT NULL, kind TEXT NOT NULL, strategy TEXT,
    messages INTEGER, prompt_tokens INTEGER, full_tokens INTEGER, llm_calls INTEGER, llm_ms REAL);
"""


def prefix_hash(thread: Thread, upto: int) -> str:
    """Identifies messages[0..upto] (positions, inclusive)."""
    return thread.prefix_digests[upto] if upto >= 0 else ""


@dataclass(frozen=True)
class Summary:
    """A rolling summary of messages[0..upto] and the model that wrote it."""

    upto: int
    text: str
    model: str
    created_at: str


@dataclass(frozen=True)
class Note:
    """A user statement kept verbatim (`quote`) with the LLM's short restatement."""

    id: int
    source: int  # position of the message it came from
    kind: str  # constraint | preference | decision | fact
    text: str
    quote: str
    superseded_by: int | None = None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class MemoryStore:
    def __init__(self, path: Path):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise BackendError(f"cannot open the memory store {path}: {exc}") from exc
        self._lock = threading.Lock()

    def summary(self, thread: Thread) -> Summary | None:
        """The newest summary still valid for this thread."""
        rows = self._db.execute(
            "SELECT upto, prefix_hash, text, model, created_at FROM summaries WHERE thread_id = ? "
            "ORDER BY upto DESC", (thread.id,)).fetchall()
        for upto, digest, text, model, created in rows:
            if upto < len(thread.messages) and prefix_hash(thread, upto) == digest:
                return Summary(upto, text, model, created)
        return None

    def put_summary(self, thread: Thread, summary: Summary, llm_ms: float) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT INTO summaries VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (thread.id, summary.upto, prefix_hash(thread, summary.upto), summary.text,
                              summary.model, llm_ms, summary.created_at))
            self._event(thread.id, "summary", llm_calls=1, llm_ms=llm_ms)

    def notes_upto(self, thread: Thread) -> int:
        """Last position the structured list has been extracted through (-1: none)."""
        row = self._db.execute("SELECT upto, prefix_hash FROM notes_progress WHERE thread_id = ?",
                               (thread.id,)).fetchone()
        if row and row[0] < len(thread.messages) and prefix_hash(thread, row[0]) == row[1]:
            return row[0]
        if row:  # the thread changed under the notes: start over
            self.forget_notes(thread.id)
        return -1

    def notes(self, thread: Thread, active_only: bool = True) -> list[Note]:
        upto = self.notes_upto(thread)
        rows = self._db.execute(
            "SELECT id, source, kind, text, quote, superseded_by FROM notes WHERE thread_id = ? AND source <= ? "
            "ORDER BY source, id", (thread.id, upto)).fetchall()
        notes = [Note(*r) for r in rows]
        return [n for n in notes if n.superseded_by is None] if active_only else notes

    def add_notes(self, thread: Thread, upto: int, new: list[tuple[int, str, str, int | None]], model: str,
                  llm_ms: float, calls: int) -> None:
        """Store notes (source, kind, text, replaces-id) extracted through position `upto`."""
        digest = prefix_hash(thread, upto)
        with self._lock, self._db:
            for source, kind, text, replaces in new:
                cur = self._db.execute(
                    "INSERT INTO notes (thread_id, source, kind, text, quote, prefix_hash, model, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (thread.id, source, kind, text, thread.messages[source].content, digest, model, _now()))
                if replaces is not None:
                    self._db.execute("UPDATE notes SET superseded_by = ? WHERE id = ? AND thread_id = ?",
                                     (cur.lastrowid, replaces, thread.id))
            self._db.execute("INSERT OR REPLACE INTO notes_progress VALUES (?, ?, ?)", (thread.id, upto, digest))
            if calls:
                self._event(thread.id, "notes", llm_calls=calls, llm_ms=llm_ms)

    def forget_notes(self, thread_id: str) -> None:
        with self._lock, self._db:
            self._db.execute("DELETE FROM notes WHERE thread_id = ?", (thread_id,))
            self._db.execute("DELETE FROM notes_progress WHERE thread_id = ?", (thread_id,))

    def forget_thread(self, thread_id: str) -> None:
        """Drop everything derived from a thread: summaries, notes, events."""
        with self._lock, self._db:
            for table in ("summaries", "notes", "notes_progress", "events"):
                self._db.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))

    def record_ask(self, thread: Thread, strategy: str, prompt_tokens: int, full_tokens: int,
                   llm_calls: int, llm_ms: float) -> None:
        with self._lock, self._db:
            self._event(thread.id, "ask", strategy, len(thread.messages), prompt_tokens, full_tokens,
                        llm_calls, llm_ms)

    def _event(self, thread_id: str, kind: str, strategy: str | None = None, messages: int | None = None,
               prompt_tokens: int | None = None, full_tokens: int | None = None, llm_calls: int = 0,
               llm_ms: float = 0.0) -> None:
        self._db.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (thread_id, _now(), kind, strategy, messages, prompt_tokens, full_tokens, llm_calls,
                          llm_ms))

    def events(self, thread_id: str | None = None) -> list[tuple]:
        sql = "SELECT thread_id, kind, strategy, messages, prompt_tokens, full_tokens, llm_calls, llm_ms FROM events"
        args: tuple = ()
        if thread_id is not None:
            sql, args = sql + " WHERE thread_id = ?", (thread_id,)
        return self._db.execute(sql, args).fetchall()
