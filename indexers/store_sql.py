"""The store's SQL, written once for SQLite and PostgreSQL: named ordered migrations, appends
that close blocks in the same transaction, scoped reads, forgetting, manifests, turn log."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

import numpy as np

from .errors import InputError
from .stored import ClosedBlock, NewMessage, StoredBlock, StoredMessage, ThreadInfo, check_thread_id


# Named, ordered schema migrations. {id}, {blob} and {real} are filled per backend.
MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("0001_threads_messages_blocks", """
CREATE TABLE threads (thread_id TEXT PRIMARY KEY, created_at TEXT NOT NULL, generation INTEGER NOT NULL DEFAULT 0);
CREATE TABLE messages (
  id {id}, thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  ts {real}, sort_ts {real} NOT NULL, tz TEXT, role TEXT NOT NULL, name TEXT, content TEXT NOT NULL,
  tool_calls TEXT, tool_call_id TEXT, source_key TEXT, terms TEXT NOT NULL DEFAULT '',
  embedder TEXT, vector {blob}, block_no INTEGER);
CREATE UNIQUE INDEX messages_source ON messages (thread_id, source_key);
CREATE INDEX messages_order ON messages (thread_id, sort_ts, id);
CREATE INDEX messages_tail ON messages (thread_id, sort_ts, id) WHERE block_no IS NULL;
CREATE INDEX messages_block ON messages (thread_id, block_no);
CREATE INDEX messages_thread_id ON messages (thread_id, id);
CREATE TABLE blocks (thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  block_no INTEGER NOT NULL, tokens INTEGER NOT NULL, parts TEXT NOT NULL, PRIMARY KEY (thread_id, block_no));
CREATE TABLE manifests (thread_id TEXT PRIMARY KEY REFERENCES threads(thread_id) ON DELETE CASCADE,
  payload TEXT NOT NULL);
CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""),
    ("0002_turn_log", """
CREATE TABLE turn_log (id {id}, thread_id TEXT NOT NULL REFERENCES threads(thread_id) ON DELETE CASCADE,
  at {real} NOT NULL, payload TEXT NOT NULL);
CREATE INDEX turn_log_thread ON turn_log (thread_id, id);
"""),
    ("0003_retention", "ALTER TABLE threads ADD COLUMN retention_days {real};"),
    # COUNT(*) over a million-message thread is a scan; the write that changes a count keeps it.
    ("0004_thread_counters", """
ALTER TABLE threads ADD COLUMN n_messages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN n_vectors INTEGER NOT NULL DEFAULT 0;
UPDATE threads SET n_messages = (SELECT COUNT(*) FROM messages m WHERE m.thread_id = threads.thread_id),
  n_vectors = (SELECT COUNT(*) FROM messages m WHERE m.thread_id = threads.thread_id AND m.vector IS NOT NULL);
"""),
)

_COLUMNS = "id, thread_id, role, content, ts, tz, sort_ts, name, tool_calls, tool_call_id, terms, block_no"


def _stamp(ts: float | None, tz: str | None) -> datetime | None:
    if ts is None:
        return None
    moment = datetime.fromtimestamp(ts, timezone.utc)
    return moment.astimezone(_zone(tz)) if tz else moment  # the message's own offset comes back


@lru_cache(maxsize=64)
def _zone(offset: str) -> timezone:
    sign = 1 if offset[0] == "+" else -1
    return timezone(sign * timedelta(hours=int(offset[1:3]), minutes=int(offset[4:6])))


def _offset(ts: datetime | None) -> str | None:
    if ts is None or ts.utcoffset() is None:
        return None
    return ts.strftime("%z")[:3] + ":" + ts.strftime("%z")[3:]


class SQLStore:
    """The store's SQL, written once. Subclasses supply the connection and the dialect."""

    placeholder = "?"
    types = {"id": "INTEGER PRIMARY KEY AUTOINCREMENT", "blob": "BLOB", "real": "REAL"}
    url: str = ""

    # -- dialect hooks -------------------------------------------------------------------
    def _connect(self):  # pragma: no cover - abstract
        raise NotImplementedError

    @contextmanager
    def _write(self, thread_id: str | None = None) -> Iterator[Any]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield

    @contextmanager
    def _read(self) -> Iterator[Any]:  # pragma: no cover - abstract
        raise NotImplementedError
        yield

    def _sql(self, text: str) -> str:
        return text if self.placeholder == "?" else text.replace("?", self.placeholder)

    # -- schema --------------------------------------------------------------------------
    def migrate(self) -> list[str]:
        """Apply the migrations not applied yet, in order; returns their names."""
        with self._write() as cur:
            cur.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
            cur.execute("SELECT name FROM schema_migrations")
            done = {r[0] for r in cur.fetchall()}
        applied = []
        for name, script in MIGRATIONS:
            if name in done:
                continue
            with self._write() as cur:
                cur.execute(self._sql("SELECT name FROM schema_migrations WHERE name = ?"), (name,))
                if cur.fetchone():  # another process applied it meanwhile
                    continue
                for statement in filter(str.strip, script.format(**self.types).split(";")):
                    cur.execute(statement)
                cur.execute(self._sql("INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)"),
                            (name, _now_iso()))
                if name == MIGRATIONS[0][0]:
                    cur.execute(self._sql("INSERT INTO store_meta (key, value) VALUES ('uid', ?)"), (uuid.uuid4().hex,))
            applied.append(name)
        return applied

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

    # -- threads -------------------------------------------------------------------------
    def _ensure_thread(self, cur, thread_id: str) -> None:
        cur.execute(self._sql("INSERT INTO threads (thread_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING"),
                    (check_thread_id(thread_id), _now_iso()))

    def threads(self) -> list[ThreadInfo]:
        # counters and index look-ups, not a scan: a thread may hold millions of messages
        first_last = ("(SELECT ts FROM messages m WHERE m.thread_id = t.thread_id AND ts IS NOT NULL "
                      "ORDER BY sort_ts {0}, id {0} LIMIT 1)")
        with self._read() as cur:
            cur.execute(f"SELECT t.thread_id, t.n_messages, {first_last.format('ASC')}, {first_last.format('DESC')}, "
                        "t.retention_days FROM threads t ORDER BY t.thread_id")
            return [ThreadInfo(r[0], int(r[1]), _stamp(r[2], None), _stamp(r[3], None), r[4]) for r in cur.fetchall()]

    def has_thread(self, thread_id: str) -> bool:
        with self._read() as cur:
            cur.execute(self._sql("SELECT 1 FROM threads WHERE thread_id = ?"), (check_thread_id(thread_id),))
            return cur.fetchone() is not None

    def generation(self, thread_id: str) -> int:
        """Grows whenever messages are removed: indexes built before must be rebuilt."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT generation FROM threads WHERE thread_id = ?"), (check_thread_id(thread_id),))
            row = cur.fetchone()
            return int(row[0]) if row else 0

    def state(self, thread_id: str) -> tuple[int, int]:
        """(generation, message count): changes whenever the thread's messages change."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT generation, n_messages FROM threads WHERE thread_id = ?"),
                        (check_thread_id(thread_id),))
            row = cur.fetchone()
            return (int(row[0]), int(row[1])) if row else (0, 0)

    def count(self, thread_id: str) -> int:
        with self._read() as cur:
            cur.execute(self._sql("SELECT n_messages FROM threads WHERE thread_id = ?"), (check_thread_id(thread_id),))
            row = cur.fetchone()
            return int(row[0]) if row else 0

    def set_retention(self, thread_id: str, days: float | None) -> None:
        with self._write(thread_id) as cur:
            cur.execute(self._sql("UPDATE threads SET retention_days = ? WHERE thread_id = ?"), (days, thread_id))

    def retention(self, thread_id: str) -> float | None:
        with self._read() as cur:
            cur.execute(self._sql("SELECT retention_days FROM threads WHERE thread_id = ?"), (check_thread_id(thread_id),))
            row = cur.fetchone()
            return row[0] if row else None

    # -- writes --------------------------------------------------------------------------
    def append(self, thread_id: str, messages: Sequence[NewMessage], embedder: str | None,
               segment: Callable[[list[StoredMessage]], list[ClosedBlock]] | None = None) -> list[int]:
        """Insert messages (skipping source keys already stored), then let `segment` close
        blocks in the open tail, all in one transaction. Returns the ids inserted."""
        check_thread_id(thread_id)
        with self._write(thread_id) as cur:
            cur.execute(self._sql("SELECT MAX(sort_ts) FROM messages WHERE thread_id = ?"), (thread_id,))
            latest = cur.fetchone()[0] or 0.0
            rows = []
            for m in messages:
                ts = m.timestamp.timestamp() if m.timestamp else None
                latest = ts if ts is not None else latest  # an untimed message sorts where it arrived
                rows.append((thread_id, ts, _offset(m.timestamp), latest, m.role, m.name, m.content,
                             json.dumps(list(m.tool_calls), ensure_ascii=False) if m.tool_calls else None,
                             m.tool_call_id, m.source_key, "\x1f".join(m.terms), embedder if m.vector is not None else None,
                             np.asarray(m.vector, dtype=np.float32).tobytes() if m.vector is not None else None))
            ids = self._insert(cur, rows)
            if ids:
                with_vectors = sum(1 for r in rows if r[-1] is not None)
                self._bump(cur, thread_id, len(ids), with_vectors if len(ids) == len(rows) else None)
            if segment is not None and ids:
                tail = self._tail(cur, thread_id)
                self._close_blocks(cur, thread_id, tail, segment(tail))
        return ids

    def _insert(self, cur, rows: list[tuple]) -> list[int]:
        sql = self._sql("INSERT INTO messages (thread_id, ts, tz, sort_ts, role, name, content, tool_calls, tool_call_id, "
                        "source_key, terms, embedder, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT DO NOTHING RETURNING id")
        ids = []
        for row in rows:
            cur.execute(sql, row)
            got = cur.fetchone()
            if got:
                ids.append(int(got[0]))
        return ids

    def tail(self, thread_id: str, with_vectors: bool = True) -> list[StoredMessage]:
        """The open tail: messages not yet in a closed block."""
        with self._read() as cur:
            return self._tail(cur, check_thread_id(thread_id), with_vectors)

    def _bump(self, cur, thread_id: str, messages: int, vectors: int | None) -> None:
        if vectors is None:  # some rows were duplicates: count what is there
            cur.execute(self._sql("UPDATE threads SET n_messages = (SELECT COUNT(*) FROM messages WHERE thread_id = ?), "
                                  "n_vectors = (SELECT COUNT(*) FROM messages WHERE thread_id = ? AND vector IS NOT NULL) "
                                  "WHERE thread_id = ?"), (thread_id, thread_id, thread_id))
        else:
            cur.execute(self._sql("UPDATE threads SET n_messages = n_messages + ?, n_vectors = n_vectors + ? "
                                  "WHERE thread_id = ?"), (messages, vectors, thread_id))

    def _tail(self, cur, thread_id: str, with_vectors: bool = True) -> list[StoredMessage]:
        cols = _COLUMNS + (", vector" if with_vectors else "")
        cur.execute(self._sql(f"SELECT {cols} FROM messages WHERE thread_id = ? AND block_no IS NULL "
                              "ORDER BY sort_ts, id"), (thread_id,))
        return [_row(r, with_vectors) for r in cur.fetchall()]

    def _close_blocks(self, cur, thread_id: str, tail: list[StoredMessage], closed: list[ClosedBlock]) -> None:
        if not closed:
            return
        # Messages in no block (system ones) that precede what stays open leave the tail too
        # (block_no -1), so the tail stays as short as the open block.
        done = {i for b in closed for i in b.message_ids}
        still_open = [k for k, m in enumerate(tail) if m.id not in done and m.role != "system"]
        first_open = still_open[0] if still_open else len(tail)
        outside = [(thread_id, m.id) for m in tail[:first_open] if m.role == "system"]
        cur.executemany(self._sql("UPDATE messages SET block_no = -1 WHERE thread_id = ? AND id = ?"), outside)
        cur.execute(self._sql("SELECT COALESCE(MAX(block_no), -1) FROM blocks WHERE thread_id = ?"), (thread_id,))
        next_no = int(cur.fetchone()[0]) + 1
        for block in closed:
            cur.execute(self._sql("INSERT INTO blocks (thread_id, block_no, tokens, parts) VALUES (?, ?, ?, ?)"),
                        (thread_id, next_no, block.tokens, json.dumps(list(block.parts))))
            cur.executemany(self._sql("UPDATE messages SET block_no = ? WHERE id = ? AND thread_id = ?"),
                            [(next_no, i, thread_id) for i in block.message_ids])
            next_no += 1

    def resegment(self, thread_id: str, segment: Callable[[list[StoredMessage]], list[ClosedBlock]]) -> None:
        """Forget every block of the thread and segment it again from the stored vectors."""
        with self._write(thread_id) as cur:
            cur.execute(self._sql("DELETE FROM blocks WHERE thread_id = ?"), (thread_id,))
            cur.execute(self._sql("UPDATE messages SET block_no = NULL WHERE thread_id = ?"), (thread_id,))
            tail = self._tail(cur, thread_id)
            self._close_blocks(cur, thread_id, tail, segment(tail))

    def existing_keys(self, thread_id: str, keys: Sequence[str]) -> set[str]:
        """Which of these source keys the thread already holds."""
        found: set[str] = set()
        with self._read() as cur:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start:start + 500])
                marks = ",".join("?" * len(chunk))
                cur.execute(self._sql(f"SELECT source_key FROM messages WHERE thread_id = ? AND source_key IN ({marks})"),
                            (check_thread_id(thread_id), *chunk))
                found.update(r[0] for r in cur.fetchall())
        return found

    def set_vectors(self, thread_id: str, vectors: Sequence[tuple[int, np.ndarray]], embedder: str) -> None:
        with self._write(thread_id) as cur:
            cur.executemany(self._sql("UPDATE messages SET vector = ?, embedder = ? WHERE id = ? AND thread_id = ?"),
                            [(np.asarray(v, dtype=np.float32).tobytes(), embedder, i, thread_id) for i, v in vectors])

    # -- reads ---------------------------------------------------------------------------
    def messages(self, thread_id: str, *, ids: Sequence[int] | None = None, last: int | None = None,
                 with_vectors: bool = False) -> list[StoredMessage]:
        """Messages in order (timestamp, then arrival): all, the given ids, or the `last` n."""
        check_thread_id(thread_id)
        cols = _COLUMNS + (", vector" if with_vectors else "")
        with self._read() as cur:
            if ids is not None:
                out = []
                for start in range(0, len(ids), 500):
                    chunk = list(ids[start:start + 500])
                    marks = ",".join("?" * len(chunk))
                    cur.execute(self._sql(f"SELECT {cols} FROM messages WHERE thread_id = ? AND id IN ({marks})"),
                                (thread_id, *chunk))
                    out.extend(_row(r, with_vectors) for r in cur.fetchall())
                return sorted(out, key=lambda m: (m.sort_ts, m.id))
            if last is not None:
                cur.execute(self._sql(f"SELECT {cols} FROM messages WHERE thread_id = ? "
                                      "ORDER BY sort_ts DESC, id DESC LIMIT ?"), (thread_id, int(last)))
                return [_row(r, with_vectors) for r in reversed(cur.fetchall())]
            cur.execute(self._sql(f"SELECT {cols} FROM messages WHERE thread_id = ? ORDER BY sort_ts, id"), (thread_id,))
            return [_row(r, with_vectors) for r in cur.fetchall()]

    def vectors(self, thread_id: str, after_id: int = 0, batch: int = 20000) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, vectors) of stored message vectors with id > after_id, in batches by id."""
        check_thread_id(thread_id)
        last = after_id
        while True:
            with self._read() as cur:
                cur.execute(self._sql("SELECT id, vector FROM messages WHERE thread_id = ? AND id > ? "
                                      "AND vector IS NOT NULL ORDER BY id LIMIT ?"), (thread_id, last, batch))
                rows = cur.fetchall()
            if not rows:
                return
            ids = np.array([r[0] for r in rows], dtype=np.int64)
            yield ids, np.vstack([np.frombuffer(bytes(r[1]), dtype=np.float32) for r in rows])
            last = int(ids[-1])

    def vector_count(self, thread_id: str) -> int:
        with self._read() as cur:
            cur.execute(self._sql("SELECT n_vectors FROM threads WHERE thread_id = ?"), (check_thread_id(thread_id),))
            row = cur.fetchone()
            return int(row[0]) if row else 0

    def blocks(self, thread_id: str, block_nos: Sequence[int] | None = None) -> list[StoredBlock]:
        """Closed blocks (all, or the given numbers) with their member message ids in order."""
        check_thread_id(thread_id)
        with self._read() as cur:
            where, params = "thread_id = ?", [thread_id]
            if block_nos is not None:
                if not block_nos:
                    return []
                where += f" AND block_no IN ({','.join('?' * len(block_nos))})"
                params += [int(b) for b in block_nos]
            cur.execute(self._sql(f"SELECT block_no, tokens, parts FROM blocks WHERE {where} ORDER BY block_no"), params)
            heads = cur.fetchall()
            # sorted here, not in SQL: ORDER BY would make the planner walk the whole thread
            cur.execute(self._sql(f"SELECT block_no, id, sort_ts FROM messages WHERE {where} "
                                  "AND block_no IS NOT NULL"), params)
            members: dict[int, list[int]] = {}
            for no, mid, _ in sorted(cur.fetchall(), key=lambda r: (r[2], r[1])):
                members.setdefault(int(no), []).append(int(mid))
        return [StoredBlock(int(no), tuple(members.get(int(no), ())), int(tok), tuple(json.loads(parts)))
                for no, tok, parts in heads]

    def block_of(self, thread_id: str, ids: Sequence[int]) -> dict[int, int | None]:
        """For each message id, its closed block number (None: in the open tail)."""
        return {m.id: m.block_no for m in self.messages(thread_id, ids=ids)}

    # -- manifests and turn log ----------------------------------------------------------
    def manifest(self, thread_id: str) -> dict[str, Any] | None:
        with self._read() as cur:
            cur.execute(self._sql("SELECT payload FROM manifests WHERE thread_id = ?"), (check_thread_id(thread_id),))
            row = cur.fetchone()
            return json.loads(row[0]) if row else None

    def put_manifest(self, thread_id: str, payload: dict[str, Any]) -> None:
        with self._write(thread_id) as cur:
            cur.execute(self._sql("INSERT INTO manifests (thread_id, payload) VALUES (?, ?) "
                                  "ON CONFLICT (thread_id) DO UPDATE SET payload = excluded.payload"),
                        (thread_id, json.dumps(payload, ensure_ascii=False)))

    def log_turn(self, thread_id: str, payload: dict[str, Any]) -> None:
        with self._write(thread_id) as cur:
            cur.execute(self._sql("INSERT INTO turn_log (thread_id, at, payload) VALUES (?, ?, ?)"),
                        (thread_id, time.time(), json.dumps(payload, ensure_ascii=False, default=str)))

    def turns(self, thread_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The turn log of a thread, oldest first (the newest `limit` when given)."""
        with self._read() as cur:
            cur.execute(self._sql("SELECT at, payload FROM turn_log WHERE thread_id = ? ORDER BY id DESC LIMIT ?"),
                        (check_thread_id(thread_id), limit or 2**31 - 1))
            rows = cur.fetchall()
        return [{"at": datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds"), **json.loads(p)}
                for at, p in reversed(rows)]

    # -- forgetting ----------------------------------------------------------------------
    def forget_thread(self, thread_id: str) -> list[StoredMessage]:
        """Remove the thread and everything stored for it; returns what was removed."""
        gone = self.messages(thread_id)
        with self._write(thread_id) as cur:
            for table in ("turn_log", "manifests", "blocks", "messages", "threads"):
                cur.execute(self._sql(f"DELETE FROM {table} WHERE thread_id = ?"), (thread_id,))
        return gone

    def forget_messages(self, thread_id: str, *, ids: Sequence[int] | None = None,
                        before: datetime | None = None) -> list[StoredMessage]:
        """Remove the given messages, or every message older than `before` (and turn-log
        entries older than it). The thread's generation grows so indexes are rebuilt."""
        check_thread_id(thread_id)
        with self._write(thread_id) as cur:
            if ids is not None:
                gone = []
                for start in range(0, len(ids), 500):
                    chunk = [int(i) for i in ids[start:start + 500]]
                    marks = ",".join("?" * len(chunk))
                    cur.execute(self._sql(f"SELECT {_COLUMNS} FROM messages WHERE thread_id = ? AND id IN ({marks})"),
                                (thread_id, *chunk))
                    gone.extend(_row(r) for r in cur.fetchall())
                    cur.execute(self._sql(f"DELETE FROM messages WHERE thread_id = ? AND id IN ({marks})"),
                                (thread_id, *chunk))
            else:
                if before is None:
                    raise InputError("forget_messages needs ids or a date")
                cutoff = before.timestamp()
                cur.execute(self._sql(f"SELECT {_COLUMNS} FROM messages WHERE thread_id = ? AND sort_ts < ?"),
                            (thread_id, cutoff))
                gone = [_row(r) for r in cur.fetchall()]
                cur.execute(self._sql("DELETE FROM messages WHERE thread_id = ? AND sort_ts < ?"), (thread_id, cutoff))
                cur.execute(self._sql("DELETE FROM turn_log WHERE thread_id = ? AND at < ?"), (thread_id, cutoff))
            if gone:
                cur.execute(self._sql("UPDATE threads SET generation = generation + 1 WHERE thread_id = ?"), (thread_id,))
                self._bump(cur, thread_id, 0, None)
        return gone

    def close(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def _row(r: Sequence[Any], with_vector: bool = False) -> StoredMessage:
    mid, tid, role, content, ts, tz, sort_ts, name, calls, call_id, terms, block_no = r[:12]
    vector = np.frombuffer(bytes(r[12]), dtype=np.float32) if with_vector and r[12] is not None else None
    return StoredMessage(int(mid), tid, role, content, _stamp(ts, tz), float(sort_ts), name,
                         tuple(json.loads(calls)) if calls else None, call_id,
                         tuple(terms.split("\x1f")) if terms else (), block_no, vector)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
