"""SQLite backend of the store: one file, WAL mode, the default."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from semhist.kernel.errors import BackendError
from .sql import SQLStore

log = logging.getLogger(__name__)
SCRUB_WAIT_MS = 2000


class SQLiteStore(SQLStore):
    """One SQLite file in WAL mode. Writers take the database lock up front (BEGIN
    IMMEDIATE), so concurrent appenders queue instead of failing halfway. Lexical candidates
    come from an FTS5 table over the closed blocks."""

    def __init__(self, path: str | Path, timeout: float = 60.0):
        self.path = Path(path).expanduser()
        self.url = f"sqlite:///{self.path}"
        self.timeout = timeout
        self._local = threading.local()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn()
        except (OSError, sqlite3.Error) as exc:
            raise BackendError(f"cannot open the store {self.path}: {exc}") from exc
        self.migrate()

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable at checkpoint, never corrupt
            conn.execute("PRAGMA foreign_keys=ON")
            # SQLite's own default leaves deleted text in free pages (Debian's build overwrites
            # it): forgetting must not depend on how the library was compiled.
            conn.execute("PRAGMA secure_delete=ON")
            # a million-message file is GBs: keep hot index pages in memory between requests
            conn.execute("PRAGMA cache_size=-32000")
            conn.execute("PRAGMA mmap_size=268435456")
            self._local.conn = conn
        return conn

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Cursor]:
        conn = self._conn()
        cur = conn.cursor()
        try:
            cur.execute(begin)
            yield cur
            cur.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                conn.rollback()
            if isinstance(exc, sqlite3.Error):
                raise BackendError(f"store {self.path}: {exc}") from exc
            raise
        finally:
            cur.close()

    @contextmanager
    def _write(self, thread_id: str | None = None) -> Iterator[sqlite3.Cursor]:
        with self._transaction("BEGIN IMMEDIATE") as cur:
            if thread_id is not None:
                self._ensure_thread(cur, thread_id)
            yield cur

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Cursor]:
        with self._transaction("BEGIN") as cur:  # a read transaction: one WAL snapshot
            yield cur

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Cursor]:
        cur = self._conn().cursor()
        try:
            yield cur
        except sqlite3.Error as exc:
            raise BackendError(f"store {self.path}: {exc}") from exc
        finally:
            cur.close()

    def _index_block(self, cur, thread_id: str, block_no: int, document: str) -> None:
        cur.execute("INSERT INTO block_terms (body, thread_id, block_no) VALUES (?, ?, ?)",
                    (document, thread_id, block_no))

    def _drop_block_terms(self, cur, thread_id: str) -> None:
        cur.execute("DELETE FROM block_terms WHERE thread_id = ?", (thread_id,))

    def _search_terms(self, cur, thread_id: str, tokens: list[str], k: int) -> list[tuple[int, float]]:
        query = " OR ".join(f'"{t}"' for t in tokens)
        cur.execute("SELECT block_no, bm25(block_terms) AS r FROM block_terms WHERE block_terms MATCH ? "
                    "AND thread_id = ? ORDER BY r LIMIT ?", (query, thread_id, k))
        return [(int(no), -float(score)) for no, score in cur.fetchall()]

    def scrub(self) -> None:
        """Copy the write-ahead log into the file and truncate it: the log still holds the
        pages as they were before the delete. Readers in other processes can hold the log
        open; then it is emptied at the next checkpoint and this says so."""
        conn = self._conn()
        try:
            # a forget waits a moment for readers, not the minute a writer would
            conn.execute(f"PRAGMA busy_timeout={SCRUB_WAIT_MS}")
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as exc:
            raise BackendError(f"store {self.path}: {exc}") from exc
        finally:
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
        if busy:
            log.warning("%s: another process is reading; forgotten pages leave the write-ahead log at "
                        "its next checkpoint", self.path)

    def vacuum(self) -> None:
        try:
            self._conn().execute("VACUUM")
        except sqlite3.Error as exc:
            raise BackendError(f"store {self.path}: {exc}") from exc
        self.scrub()

    def close(self) -> None:
        """Close this thread's connection, the write-ahead log copied into the file first: a
        backup that copies semhist.sqlite3 alone after a clean stop has everything."""
        conn = getattr(self._local, "conn", None) or self._conn()
        try:
            conn.execute(f"PRAGMA busy_timeout={SCRUB_WAIT_MS}")
            busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if busy:
                log.warning("%s: another process is using the store; its write-ahead log is copied into "
                            "the file when the last one closes", self.path)
        except sqlite3.Error as exc:  # closing goes on: the log is still there, and still valid
            log.warning("%s: no checkpoint at close: %s", self.path, exc)
        conn.close()
        self._local.conn = None
