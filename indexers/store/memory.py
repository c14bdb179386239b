"""What compaction derived from a thread (rolling summaries, the structured list of user
statements and how far it has read), manifests and the turn log: tables of the store, keyed
by message ids, shared by every replica and removed by forgetting."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from .records import Key, NoteRecord, SummaryRecord
from .rows import now_iso, request_key

_NOTE_COLUMNS = "id, source_id, kind, text, quote, source_ts, superseded_by"


class MemoryMixin:
    # -- summaries ------------------------------------------------------------------------
    def summary(self: Any, thread_id: str) -> SummaryRecord | None:
        """The newest summary of the thread (the one that covers the most)."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT upto_ts, upto_id, text, model, covered_tokens, created_at, first_ts "
                                  "FROM summaries WHERE thread_id = ? ORDER BY upto_ts DESC, upto_id DESC LIMIT 1"),
                        (thread_id,))
            row = cur.fetchone()
        if row is None:
            return None
        return SummaryRecord((float(row[0]), int(row[1])), row[2], row[3], int(row[4]), row[5], row[6], float(row[0]))

    def put_summary(self: Any, thread_id: str, summary: SummaryRecord, llm_ms: float) -> None:
        with self._write(thread_id) as cur:
            cur.execute(self._sql("INSERT INTO summaries (thread_id, upto_ts, upto_id, first_ts, covered_tokens, text, "
                                  "model, llm_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                        (thread_id, summary.upto[0], summary.upto[1], summary.first_ts, summary.covered_tokens,
                         summary.text, summary.model, llm_ms, summary.created_at))

    # -- the structured list -------------------------------------------------------------
    def notes(self: Any, thread_id: str, active_only: bool = True) -> list[NoteRecord]:
        where = " AND superseded_by IS NULL" if active_only else ""
        with self._read() as cur:
            cur.execute(self._sql(f"SELECT {_NOTE_COLUMNS} FROM notes WHERE thread_id = ?{where} ORDER BY id"),
                        (thread_id,))
            return [NoteRecord(int(r[0]), int(r[1]), r[2], r[3], r[4], r[5], r[6]) for r in cur.fetchall()]

    def notes_progress(self: Any, thread_id: str) -> Key | None:
        """The last message the statement extraction has read (every earlier one is done)."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT notes_ts, notes_id FROM threads WHERE thread_id = ?"),
                        (thread_id,))
            row = cur.fetchone()
        return (float(row[0]), int(row[1])) if row and row[1] is not None else None

    def record_extraction(self: Any, thread_id: str, upto: Key, note: tuple | None, model: str,
                          llm_ms: float) -> int | None:
        """Move the extraction past `upto`, with the statement found there, in one write:
        a statement is stored once, and a message read once is never read again.
        `note` is (source_id, source_ts, kind, text, quote, replaces-id or None)."""
        with self._write(thread_id) as cur:
            cur.execute(self._sql("SELECT notes_ts, notes_id FROM threads WHERE thread_id = ?"), (thread_id,))
            row = cur.fetchone()
            if row and row[1] is not None and (float(row[0]), int(row[1])) >= upto:
                return None  # another replica read this message first
            new_id = None
            if note is not None:
                source_id, source_ts, kind, text, quote, replaces = note
                cur.execute(self._sql("INSERT INTO notes (thread_id, source_id, source_ts, kind, text, quote, model, "
                                      "llm_ms, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"),
                            (thread_id, source_id, source_ts, kind, text, quote, model, llm_ms, now_iso()))
                new_id = int(cur.fetchone()[0])
                if replaces is not None:
                    cur.execute(self._sql("UPDATE notes SET superseded_by = ? WHERE id = ? AND thread_id = ?"),
                                (new_id, replaces, thread_id))
            cur.execute(self._sql("UPDATE threads SET notes_ts = ?, notes_id = ? WHERE thread_id = ?"),
                        (upto[0], upto[1], thread_id))
            return new_id

    # -- manifests and turn log ----------------------------------------------------------
    def manifest(self: Any, thread_id: str) -> dict[str, Any] | None:
        with self._read() as cur:
            cur.execute(self._sql("SELECT payload FROM manifests WHERE thread_id = ?"), (thread_id,))
            row = cur.fetchone()
            return json.loads(row[0]) if row else None

    def put_manifest(self: Any, thread_id: str, payload: dict[str, Any]) -> None:
        with self._write(thread_id) as cur:
            self._put_manifest(cur, thread_id, payload)

    def log_turn(self: Any, thread_id: str, payload: dict[str, Any],
                 prompt: list[dict[str, Any]] | None = None) -> None:
        """Log one ask; `prompt`: the messages it sent, kept beside it (SEMHIST_LOG_PROMPTS)."""
        with self._write(thread_id) as cur:
            request = payload.get("request")
            cur.execute(self._sql("INSERT INTO turn_log (thread_id, at, payload, request_key) VALUES (?, ?, ?, ?) "
                                  "RETURNING id"),
                        (thread_id, time.time(), json.dumps(payload, ensure_ascii=False, default=str),
                         request_key(request) if isinstance(request, str) else None))
            turn_id = cur.fetchone()[0]
            if prompt is not None:
                cur.execute(self._sql("INSERT INTO turn_prompts (turn_id, thread_id, messages) VALUES (?, ?, ?)"),
                            (turn_id, thread_id, json.dumps(prompt, ensure_ascii=False, default=str)))

    def turns(self: Any, thread_id: str | None, limit: int | None = None,
              prompts: bool = False) -> list[dict[str, Any]]:
        """The turn log of a thread (every thread when None), oldest first; the newest
        `limit` when given. Each record carries its thread id; with `prompts`, the messages
        it sent as "prompt" where they were kept."""
        where, params = ("WHERE l.thread_id = ? ", [thread_id]) if thread_id else ("", [])
        kept, join = ("p.messages", "LEFT JOIN turn_prompts p ON p.thread_id = l.thread_id AND p.turn_id = l.id ") if prompts else ("NULL", "")
        with self._read() as cur:
            cur.execute(self._sql(f"SELECT l.thread_id, l.at, l.payload, {kept} FROM turn_log l {join}{where}"
                                  "ORDER BY l.id DESC LIMIT ?"), (*params, limit or 2**31 - 1))
            rows = cur.fetchall()
        return [{"thread": t, "at": datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds"),
                 **json.loads(p), **({"prompt": json.loads(m)} if m else {})} for t, at, p, m in reversed(rows)]
