"""The store's SQL, written once for SQLite and PostgreSQL: migrations, threads and their
markers, appends that close blocks in the same transaction, and scoped reads."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from .forget import ForgetMixin
from semhist.kernel.errors import NotFoundError
from .lexical_keys import block_document
from .memory import MemoryMixin
from .reads import ReadMixin
from .scopes import ScopeMixin
from . import partitions
from .migrations import MIGRATIONS, script
from semhist.kernel.ids import check_thread_id
from semhist.kernel.writers import KEY_SCOPE_SEPARATOR

from .records import (AppendResult, StaleRules, ClosedBlock, Marker, NewMessage, StoredBlock, StoredMessage,
                      ThreadInfo)
from .rows import INSERT, chunks, history_blob, marks, now_iso, offset, stamp, terms_column

_MARKER = "uid, generation, version, n_messages, n_tokens, n_vectors, pii"

# segment(tail, history) -> (blocks closed for good, the drift history after them)
Segment = Callable[[list[StoredMessage], tuple[float, ...]], tuple[list[ClosedBlock], tuple[float, ...]]]


class SQLStore(ReadMixin, ForgetMixin, MemoryMixin, ScopeMixin):
    """The store's SQL, written once. Subclasses supply the connection and the dialect."""

    placeholder = "?"
    dialect = "sqlite"
    types = {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "blob": "BLOB", "real": "REAL"}
    url: str = ""
    # How a look-up of messages by id names their thread. SQLite: `+thread_id` (no index), else
    # it walks the thread's index instead of the ids' primary key; PostgreSQL: `thread_id`, which
    # keeps the look-up in the thread's partition.
    _thread_check = "+thread_id"

    # -- dialect hooks -------------------------------------------------------------------
    @contextmanager
    def _write(self, thread_id: str | None = None) -> Iterator[Any]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield

    @contextmanager
    def _read(self) -> Iterator[Any]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield

    @contextmanager
    def _snapshot(self) -> Iterator[Any]:  # pragma: no cover - abstract
        """Several reads that see one committed state."""
        raise NotImplementedError
        yield

    def _index_block(self, cur, thread_id: str, block_no: int, document: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def _drop_block_terms(self, cur, thread_id: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _search_terms(self, cur, thread_id: str, tokens: list[str], k: int) -> list[tuple[int, float]]:  # pragma: no cover
        raise NotImplementedError

    def _sql(self, text: str) -> str:
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- schema --------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply the migrations not applied yet, in order; returns their names."""
        with self._write() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
            cur.execute("SELECT name FROM schema_migrations")
            done = {r[0] for r in cur.fetchall()}
        applied = []
        for migration in MIGRATIONS:
            name, _, data_step = migration
            if name in done:
                continue
            with self._write() as cur:
                cur.execute(self._sql("SELECT name FROM schema_migrations WHERE name = ?"), (name,))
                if cur.fetchone():  # another process applied it meanwhile
                    continue
                for statement in script(migration, self.dialect, self.types):
                    cur.execute(statement)
                if data_step is not None:
                    data_step(self, cur)
                cur.execute(self._sql("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)"),
                            (name, now_iso()))
                if name == MIGRATIONS[0][0]:
                    cur.execute(self._sql("INSERT INTO store_meta (key, value) VALUES ('uid', ?)"), (uuid.uuid4().hex,))
            applied.append(name)
        return applied

    def partitions(self) -> dict[str, dict[int, int]]:
        """PostgreSQL: for each table of thread rows, its hash partitions by modulus ({}: SQLite)."""
        return partitions.layout(self)

    def raise_partitions(self, count: int, progress: Callable[[int, int], None] | None = None) -> int:
        """PostgreSQL: split the partitions until each table has `count` (partitions.py)."""
        return partitions.raise_partitions(self, count, progress)

    def applied_migrations(self) -> list[str]:
        with self._read() as cur:
            cur.execute("SELECT name FROM schema_migrations ORDER BY name")
            return [r[0] for r in cur.fetchall()]

    @property
    def uid(self) -> str:
        """A random id made when the store was created: names its local FAISS files."""
        with self._read() as cur:
            cur.execute("SELECT value FROM store_meta WHERE key = 'uid'")
            return cur.fetchone()[0]

    def secret(self) -> bytes:
        """A random key made on first use and kept in the store, shared by every process that
        uses it: what derived thread ids are keyed with when SEMHIST_SECRET is not set."""
        with self._read() as cur:
            cur.execute("SELECT value FROM store_meta WHERE key = 'secret'")
            row = cur.fetchone()
        if row is None:
            with self._write() as cur:  # two processes at once: the first one's stays
                cur.execute(self._sql("INSERT INTO store_meta (key, value) VALUES ('secret', ?) "
                                      "ON CONFLICT (key) DO NOTHING"), (secrets.token_hex(32),))
                cur.execute("SELECT value FROM store_meta WHERE key = 'secret'")
                row = cur.fetchone()
        return bytes.fromhex(row[0])

    # -- threads -------------------------------------------------------------------------
    def _ensure_thread(self, cur, thread_id: str) -> None:
        # Every write passes here: the one place a thread row can be made, so the one place the
        # store checks an id. Reads take the id as given (History checked it where it came in;
        # an id that was never stored finds nothing).
        cur.execute(self._sql("INSERT INTO threads (thread_id, created_at, uid) VALUES (?, ?, ?) ON CONFLICT DO NOTHING"),
                    (check_thread_id(thread_id), now_iso(), uuid.uuid4().hex))

    def _marker(self, cur, thread_id: str) -> Marker | None:
        cur.execute(self._sql(f"SELECT {_MARKER} FROM threads WHERE thread_id = ?"), (thread_id,))
        row = cur.fetchone()
        return Marker(row[0], int(row[1]), int(row[2]), int(row[3]), int(row[4]), int(row[5]), row[6]) if row else None

    def marker(self, thread_id: str) -> Marker | None:
        """The thread's current identity and version; None when there is no such thread."""
        with self._read() as cur:
            return self._marker(cur, thread_id)

    def threads(self) -> list[ThreadInfo]:
        # counters and index look-ups, not a scan: a thread may hold millions of messages
        # each time with its message's own offset (tz), as the thread's messages show it
        first_last = ("(SELECT {1} FROM messages m WHERE m.thread_id = t.thread_id AND ts IS NOT NULL "
                      "ORDER BY sort_ts {0}, id {0} LIMIT 1)")
        ends = ", ".join(first_last.format(order, column) for order in ("ASC", "DESC") for column in ("ts", "tz"))
        with self._read() as cur:
            cur.execute(f"SELECT t.thread_id, t.n_messages, {ends}, t.retention_days FROM threads t ORDER BY t.thread_id")
            return [ThreadInfo(r[0], int(r[1]), stamp(r[2], r[3]), stamp(r[4], r[5]), r[6]) for r in cur.fetchall()]

    def totals(self) -> tuple[int, int]:
        """(threads, messages) stored: two counters summed, cheap enough for a health check."""
        with self._read() as cur:
            cur.execute("SELECT COUNT(*), COALESCE(SUM(n_messages), 0) FROM threads")
            row = cur.fetchone()
        return int(row[0]), int(row[1])

    def has_thread(self, thread_id: str) -> bool:
        return self.marker(thread_id) is not None

    def count(self, thread_id: str) -> int:
        marker = self.marker(thread_id)
        return marker.messages if marker else 0

    def set_retention(self, thread_id: str, days: float | None) -> None:
        with self._write(thread_id) as cur:
            cur.execute(self._sql("UPDATE threads SET retention_days = ? WHERE thread_id = ?"), (days, thread_id))

    def retention(self, thread_id: str) -> float | None:
        with self._read() as cur:
            cur.execute(self._sql("SELECT retention_days FROM threads WHERE thread_id = ?"), (thread_id,))
            row = cur.fetchone()
            return row[0] if row else None

    def retained(self) -> list[tuple[str, float]]:
        """(thread, days) of every thread with a retention period: one pass over `threads`,
        not the per-thread look-ups of `threads()`."""
        with self._read() as cur:
            cur.execute("SELECT thread_id, retention_days FROM threads WHERE retention_days IS NOT NULL "
                        "ORDER BY thread_id")
            return [(t, float(d)) for t, d in cur.fetchall()]

    # -- writes --------------------------------------------------------------------------
    def pii(self, thread_id: str) -> str | None:
        """The masking rules the thread's messages were written with (comma-separated)."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT pii FROM threads WHERE thread_id = ?"), (thread_id,))
            row = cur.fetchone()
            return row[0] if row else None

    def append(self, thread_id: str, messages: Sequence[NewMessage], embedder: str | None,
               segment: Segment | None = None, *, manifest: dict[str, Any] | None = None,
               pii: str | None = None) -> AppendResult:
        """Insert messages (skipping source keys already stored), then let `segment` close
        blocks in the open tail, all in one transaction; with the thread's manifest and the
        masking rules the messages were prepared with. Raises StaleRules when another writer
        gave the thread rules these messages were not masked with."""
        with self._write(thread_id) as cur:
            self._record_rules(cur, thread_id, pii)
            if manifest is not None:
                self._put_manifest(cur, thread_id, manifest)
            before = self._marker(cur, thread_id)
            cur.execute(self._sql("SELECT MAX(sort_ts) FROM messages WHERE thread_id = ?"), (thread_id,))
            latest = cur.fetchone()[0] or 0.0
            rows, sort_keys = [], []
            for m in messages:
                ts = m.timestamp.timestamp() if m.timestamp else None
                latest = ts if ts is not None else latest  # an untimed message sorts where it arrived
                sort_keys.append(latest)
                rows.append((thread_id, ts, offset(m.timestamp), latest, m.role, m.name, m.content,
                             json.dumps(list(m.tool_calls), ensure_ascii=False) if m.tool_calls else None,
                             m.tool_call_id, m.source_key, terms_column(m.terms), embedder if m.vector is not None else None,
                             np.asarray(m.vector, dtype=np.float32).tobytes() if m.vector is not None else None,
                             int(m.tokens), json.dumps(m.verbatim, ensure_ascii=False) if m.verbatim else None,
                             m.writer))
            row_ids = self._insert(cur, rows)
            stored = tuple(StoredMessage(i, thread_id, m.role, m.content, m.timestamp, key, m.name, m.tool_calls,
                                         m.tool_call_id, m.terms, None, m.vector, m.tokens, m.verbatim, m.writer)
                           for i, m, key in zip(row_ids, messages, sort_keys) if i is not None)
            closed, history = [], None
            if stored:
                self._bump(cur, thread_id, stored, complete=len(stored) == len(rows))
                if segment is not None:
                    closed, history = self._segment(cur, thread_id, segment)
            after = self._marker(cur, thread_id)
        return AppendResult(tuple(m.id for m in stored), tuple(closed), before, after, stored, history)

    def _record_rules(self, cur, thread_id: str, pii: str | None) -> None:
        cur.execute(self._sql("SELECT pii FROM threads WHERE thread_id = ?"), (thread_id,))
        stored = set((cur.fetchone()[0] or "").split(",")) - {""}
        used = set(pii.split(",")) if pii else set()
        if stored - used:
            raise StaleRules(",".join(sorted(stored)))
        if used - stored:
            cur.execute(self._sql("UPDATE threads SET pii = ? WHERE thread_id = ?"), (pii, thread_id))

    def _put_manifest(self, cur, thread_id: str, payload: dict[str, Any]) -> None:
        cur.execute(self._sql("INSERT INTO manifests (thread_id, payload) VALUES (?, ?) "
                              "ON CONFLICT (thread_id) DO UPDATE SET payload = excluded.payload"),
                    (thread_id, json.dumps(payload, ensure_ascii=False)))

    def _insert(self, cur, rows: list[tuple]) -> list[int | None]:
        """The id of each row, None for a row whose source key was stored already."""
        sql = self._sql(INSERT)
        ids: list[int | None] = []
        for row in rows:
            cur.execute(sql, row)
            got = cur.fetchone()
            ids.append(int(got[0]) if got else None)
        return ids

    def _bump(self, cur, thread_id: str, added: Sequence[StoredMessage] = (), complete: bool = True) -> None:
        """Keep the thread's counters and version with every write."""
        if not complete:  # some rows were duplicates or removed: count what is there
            cur.execute(self._sql(
                "UPDATE threads SET n_messages = (SELECT COUNT(*) FROM messages WHERE thread_id = ?), "
                "n_vectors = (SELECT COUNT(*) FROM messages WHERE thread_id = ? AND vector IS NOT NULL), "
                "n_tokens = (SELECT COALESCE(SUM(tokens), 0) FROM messages WHERE thread_id = ? AND role <> 'system'), "
                "version = version + 1 WHERE thread_id = ?"), (thread_id,) * 4)
            return
        vectors = sum(1 for m in added if m.vector is not None)
        tokens = sum(m.tokens for m in added if m.role != "system")
        cur.execute(self._sql("UPDATE threads SET n_messages = n_messages + ?, n_vectors = n_vectors + ?, "
                              "n_tokens = n_tokens + ?, version = version + 1 WHERE thread_id = ?"),
                    (len(added), vectors, tokens, thread_id))

    def _segment(self, cur, thread_id: str, segment: Segment) -> tuple[list[StoredBlock], tuple[float, ...] | None]:
        cur.execute(self._sql("SELECT segment_history FROM threads WHERE thread_id = ?"), (thread_id,))
        history = history_blob(cur.fetchone()[0])
        tail = self._tail(cur, thread_id)
        blocks, history = segment(tail, history)
        closed = self._close_blocks(cur, thread_id, tail, blocks)
        if not closed:
            return [], None
        cur.execute(self._sql("UPDATE threads SET segment_history = ? WHERE thread_id = ?"),
                    (np.asarray(history, dtype=np.float32).tobytes(), thread_id))
        return closed, tuple(history)

    def _close_blocks(self, cur, thread_id: str, tail: list[StoredMessage], closed: list[ClosedBlock]) -> list[StoredBlock]:
        if not closed:
            return []
        # Messages in no block (system ones) that precede what stays open leave the tail too
        # (block_no -1), so the tail stays as short as the open block.
        done = {i for b in closed for i in b.message_ids}
        still_open = [k for k, m in enumerate(tail) if m.id not in done and m.role != "system"]
        first_open = still_open[0] if still_open else len(tail)
        outside = [(thread_id, m.id) for m in tail[:first_open] if m.role == "system"]
        cur.executemany(self._sql("UPDATE messages SET block_no = -1 WHERE thread_id = ? AND id = ?"), outside)
        cur.execute(self._sql("SELECT COALESCE(MAX(block_no), -1) FROM blocks WHERE thread_id = ?"), (thread_id,))
        next_no = int(cur.fetchone()[0]) + 1
        terms = {m.id: m.terms for m in tail}
        out = []
        cause = self._cut_before(cur, thread_id, next_no)  # the first block's: decided when the one before closed
        for block in closed:
            cause = block.cause or cause
            cur.execute(self._sql("INSERT INTO blocks (thread_id, block_no, tokens, parts, cause, cut) "
                                  "VALUES (?, ?, ?, ?, ?, ?)"),
                        (thread_id, next_no, block.tokens, json.dumps(list(block.parts)), cause or None,
                         block.cut or None))
            cur.executemany(self._sql("UPDATE messages SET block_no = ? WHERE id = ? AND thread_id = ?"),
                            [(next_no, i, thread_id) for i in block.message_ids])
            self._index_terms(cur, thread_id, next_no, [t for i in block.message_ids for t in terms.get(i, ())])
            out.append(StoredBlock(next_no, tuple(block.message_ids), block.tokens, tuple(block.parts), cause, block.cut))
            next_no, cause = next_no + 1, block.cut
        return out

    def _cut_before(self, cur, thread_id: str, block_no: int) -> str:
        if block_no == 0:
            return ""
        cur.execute(self._sql("SELECT cut FROM blocks WHERE thread_id = ? AND block_no = ?"), (thread_id, block_no - 1))
        row = cur.fetchone()
        return (row[0] or "") if row else ""

    def _index_terms(self, cur, thread_id: str, block_no: int, terms: list[str]) -> None:
        """A closed block's terms into the full-text index, and into each term's block count."""
        document = block_document(thread_id, terms)
        self._index_block(cur, thread_id, block_no, document)
        cur.executemany(self._sql("INSERT INTO block_term_df (thread_id, token, df) VALUES (?, ?, 1) "
                                  "ON CONFLICT (thread_id, token) DO UPDATE SET df = block_term_df.df + 1"),
                        [(thread_id, token) for token in sorted(set(document.split()))])

    def existing_keys(self, thread_id: str, keys: Sequence[str]) -> dict[str, int]:
        """Which of these source keys the thread already holds, with their message ids."""
        found: dict[str, int] = {}
        with self._read() as cur:
            for chunk in chunks(keys):
                cur.execute(self._sql(f"SELECT source_key, id FROM messages WHERE thread_id = ? AND source_key IN "
                                      f"({marks(chunk)})"), (thread_id, *chunk))
                found.update((r[0], int(r[1])) for r in cur.fetchall())
        return found

    def id_of(self, thread_id: str, source_key: str | None) -> int:
        """The id of the message stored with this source key."""
        # never stored: no NUL, no surrogate (a scoped writer's key has one separator, kernel/writers.py)
        if not isinstance(source_key, str) or not source_key.replace(KEY_SCOPE_SEPARATOR, "", 1).isprintable():
            raise NotFoundError(f"thread {thread_id} holds no message with key {source_key!r}")
        with self._read() as cur:
            cur.execute(self._sql("SELECT id FROM messages WHERE thread_id = ? AND source_key = ?"),
                        (thread_id, source_key))
            row = cur.fetchone()
        if row is None:
            raise NotFoundError(f"thread {thread_id} holds no message with key {source_key!r}")
        return int(row[0])
